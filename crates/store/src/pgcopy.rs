//! Rows in PostgreSQL's binary `COPY` format (the "Binary Format" section of
//! the `COPY` reference): an 11-byte signature, a flags word and an empty
//! header extension, then per row a 16-bit field count and per field a
//! 32-bit length (-1 for NULL) and the type's binary send representation,
//! then a -1 trailer. The ledger writes its batches this way: the server
//! decodes fixed-width integers instead of parsing text or unpacking
//! arrays.

use chrono::{DateTime, NaiveDate, Utc};

const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Days and microseconds count from 2000-01-01 00:00 UTC in Postgres.
const PG_EPOCH_DAYS_FROM_CE: i32 = 730_120;
const PG_EPOCH_MICROS_FROM_UNIX: i64 = 946_684_800_000_000;

/// A field too large for the format's 32-bit length.
#[derive(Debug, thiserror::Error)]
#[error("a COPY field of {0} bytes exceeds the binary format's 2 GiB")]
pub struct FieldTooLarge(pub usize);

/// A binary COPY payload under construction: [`BinaryCopy::row`] starts a
/// row, one typed call per column in the table's column-list order, then
/// [`BinaryCopy::finish`].
pub struct BinaryCopy {
    buf: Vec<u8>,
    /// Fields the current row still expects (checked in debug builds).
    expect: i16,
}

impl BinaryCopy {
    pub fn with_capacity(bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(bytes + 19);
        buf.extend_from_slice(SIGNATURE);
        buf.extend_from_slice(&0i32.to_be_bytes()); // flags: no OIDs
        buf.extend_from_slice(&0i32.to_be_bytes()); // header extension length
        Self { buf, expect: 0 }
    }

    pub fn row(&mut self, fields: i16) {
        debug_assert_eq!(self.expect, 0, "the previous row is short of fields");
        self.expect = fields;
        self.buf.extend_from_slice(&fields.to_be_bytes());
    }

    fn field(&mut self, bytes: &[u8]) -> Result<(), FieldTooLarge> {
        let len = i32::try_from(bytes.len()).map_err(|_| FieldTooLarge(bytes.len()))?;
        self.counted();
        self.buf.extend_from_slice(&len.to_be_bytes());
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    fn counted(&mut self) {
        debug_assert!(self.expect > 0, "more fields than the row declared");
        self.expect -= 1;
    }

    pub fn null(&mut self) {
        self.counted();
        self.buf.extend_from_slice(&(-1i32).to_be_bytes());
    }

    pub fn text(&mut self, s: &str) -> Result<(), FieldTooLarge> {
        self.field(s.as_bytes())
    }

    pub fn opt_text(&mut self, s: Option<&str>) -> Result<(), FieldTooLarge> {
        match s {
            Some(s) => self.text(s),
            None => {
                self.null();
                Ok(())
            }
        }
    }

    pub fn int8(&mut self, v: i64) {
        self.counted();
        self.buf.extend_from_slice(&8i32.to_be_bytes());
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn bool(&mut self, v: bool) {
        self.counted();
        self.buf.extend_from_slice(&1i32.to_be_bytes());
        self.buf.push(u8::from(v));
    }

    /// A `date`: days since 2000-01-01.
    pub fn date(&mut self, d: NaiveDate) {
        use chrono::Datelike;
        self.counted();
        self.buf.extend_from_slice(&4i32.to_be_bytes());
        let days = d.num_days_from_ce() - PG_EPOCH_DAYS_FROM_CE;
        self.buf.extend_from_slice(&days.to_be_bytes());
    }

    /// A `timestamptz`: microseconds since 2000-01-01 00:00 UTC.
    pub fn timestamptz(&mut self, t: DateTime<Utc>) {
        self.counted();
        self.buf.extend_from_slice(&8i32.to_be_bytes());
        let micros = t.timestamp_micros() - PG_EPOCH_MICROS_FROM_UNIX;
        self.buf.extend_from_slice(&micros.to_be_bytes());
    }

    /// A `jsonb`: format version 1, then the JSON text.
    pub fn jsonb(&mut self, v: &serde_json::Value) -> Result<(), FieldTooLarge> {
        // Written in place: the length is filled in once the text is.
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0, 0, 0, 1]);
        // Writing a Value into a Vec cannot fail.
        serde_json::to_writer(&mut self.buf, v).expect("a JSON value serialises");
        let len = self.buf.len() - at - 4;
        let Ok(len32) = i32::try_from(len) else {
            self.buf.truncate(at);
            return Err(FieldTooLarge(len));
        };
        self.counted();
        self.buf[at..at + 4].copy_from_slice(&len32.to_be_bytes());
        Ok(())
    }

    /// A `jsonb` from JSON text the caller wrote (valid JSON: the server
    /// checks it).
    pub fn jsonb_text(&mut self, json: &str) -> Result<(), FieldTooLarge> {
        let len = json.len() + 1;
        let len32 = i32::try_from(len).map_err(|_| FieldTooLarge(len))?;
        self.counted();
        self.buf.extend_from_slice(&len32.to_be_bytes());
        self.buf.push(1);
        self.buf.extend_from_slice(json.as_bytes());
        Ok(())
    }

    pub fn opt_jsonb(&mut self, v: Option<&serde_json::Value>) -> Result<(), FieldTooLarge> {
        match v {
            Some(v) => self.jsonb(v),
            None => {
                self.null();
                Ok(())
            }
        }
    }

    pub fn finish(mut self) -> Vec<u8> {
        debug_assert_eq!(self.expect, 0, "the last row is short of fields");
        self.buf.extend_from_slice(&(-1i16).to_be_bytes());
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_has_the_signature_a_row_and_the_trailer() {
        let mut c = BinaryCopy::with_capacity(0);
        c.row(3);
        c.text("ab").unwrap();
        c.null();
        c.int8(-2);
        let b = c.finish();
        let mut want = b"PGCOPY\n\xff\r\n\0".to_vec();
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[0, 3]);
        want.extend_from_slice(&[0, 0, 0, 2, b'a', b'b']);
        want.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        want.extend_from_slice(&[0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]);
        want.extend_from_slice(&[0xff, 0xff]);
        assert_eq!(b, want);
    }

    /// The epochs, from the dates Postgres counts from (not from the
    /// constants above): 2000-01-01 is day 0, 2000-01-02 day 1, 1999-12-31
    /// day -1; one second past the epoch is 1,000,000 µs.
    #[test]
    fn dates_and_timestamps_count_from_2000() {
        fn last4(c: BinaryCopy) -> Vec<u8> {
            let b = c.finish();
            b[b.len() - 6..b.len() - 2].to_vec()
        }
        for (d, days) in [
            ((2000, 1, 1), 0i32),
            ((2000, 1, 2), 1),
            ((1999, 12, 31), -1),
            ((2026, 12, 2), 9832),
        ] {
            let mut c = BinaryCopy::with_capacity(0);
            c.row(1);
            c.date(NaiveDate::from_ymd_opt(d.0, d.1, d.2).unwrap());
            assert_eq!(last4(c), days.to_be_bytes(), "{d:?}");
        }
        let t = DateTime::parse_from_rfc3339("2000-01-01T00:00:01Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut c = BinaryCopy::with_capacity(0);
        c.row(1);
        c.timestamptz(t);
        let b = c.finish();
        assert_eq!(&b[b.len() - 10..b.len() - 2], &1_000_000i64.to_be_bytes());
    }

    #[test]
    fn jsonb_is_version_one_then_the_text() {
        let mut c = BinaryCopy::with_capacity(0);
        c.row(2);
        c.jsonb(&serde_json::json!({"a": "b"})).unwrap();
        c.bool(true);
        let b = c.finish();
        let tail = &b[19 + 2..]; // after the header and the field count
        assert_eq!(&tail[..4], &[0, 0, 0, 10]);
        assert_eq!(&tail[4..14], b"\x01{\"a\":\"b\"}");
        assert_eq!(&tail[14..19], &[0, 0, 0, 1, 1]);
    }
}
