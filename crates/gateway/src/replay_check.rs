//! The Postgres ledger as the hold engine's replay check: a settle that
//! finds no hold record in Redis books only a request the ledger does not
//! have (a replay after the settled record's 24 h expired books nothing).

use quota::BookedCheck;
use std::future::Future;
use std::pin::Pin;
use store::{Store, TenantScope};

pub struct LedgerBooked(pub Store);

impl BookedCheck for LedgerBooked {
    fn is_booked<'a>(
        &'a self,
        tenant: &'a str,
        request_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>> {
        Box::pin(async move {
            self.0
                .usage_event_exists(&TenantScope::system(), tenant, request_id)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
