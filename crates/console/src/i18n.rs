//! The console's two languages. Every visible string is a key in `TABLE`
//! with its English and Chinese text; templates call `c.t("key")`. A unit
//! test checks that every key a template or handler uses is in the table.

use axum::http::HeaderMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    Zh,
}

pub const LANG_COOKIE: &str = "tg_lang";

impl Lang {
    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
        }
    }

    /// `zh…` → Chinese, anything else → English.
    pub fn parse(s: &str) -> Option<Lang> {
        match s.trim().to_ascii_lowercase() {
            s if s.starts_with("zh") => Some(Lang::Zh),
            s if s.starts_with("en") => Some(Lang::En),
            _ => None,
        }
    }

    /// The language cookie, else the first language of Accept-Language
    /// that the console speaks, else English.
    pub fn from_headers(h: &HeaderMap) -> Lang {
        if let Some(l) = crate::cookies::cookie(h, LANG_COOKIE).and_then(|v| Lang::parse(&v)) {
            return l;
        }
        h.get(axum::http::header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.split(',')
                    .filter_map(|part| Lang::parse(part.split(';').next().unwrap_or("")))
                    .next()
            })
            .unwrap_or_default()
    }

    pub fn t(self, key: &str) -> &'static str {
        match lookup(key) {
            Some((en, zh)) => match self {
                Lang::En => en,
                Lang::Zh => zh,
            },
            None => {
                debug_assert!(false, "missing translation key {key}");
                "?"
            }
        }
    }
}

impl Lang {
    /// A stored code in this language: the text of `area.code` if the
    /// table has it, else the code itself (data, shown as stored).
    pub fn tv(self, area: &str, code: &str) -> String {
        match lookup(&format!("{area}.{code}")) {
            Some((en, zh)) => match self {
                Lang::En => en.to_string(),
                Lang::Zh => zh.to_string(),
            },
            None if area == "reason" => {
                self.budget_reason(code).unwrap_or_else(|| code.to_string())
            }
            None => code.to_string(),
        }
    }

    /// A budget's reason code (`{level}_{model_}{period}_{kind}_exhausted`,
    /// docs/limits.md) in words: 72 codes, composed rather than listed.
    fn budget_reason(self, code: &str) -> Option<String> {
        use domain::budgets::{BudgetKind, BudgetPeriod};
        use domain::ScopeKind;
        let (level, model, period, kind) = domain::chain_budgets::parse_reason(code)?;
        let (en_level, zh_level) = match level {
            ScopeKind::Tenant => ("the tenant's", "租户"),
            ScopeKind::App => ("the app's", "应用"),
            _ => ("the key's", "密钥"),
        };
        let (en_period, zh_period) = match period {
            BudgetPeriod::Day => ("daily", "每日"),
            BudgetPeriod::Week => ("weekly", "每周"),
            BudgetPeriod::Month => ("monthly", "每月"),
            BudgetPeriod::Quarter => ("quarterly", "每季度"),
        };
        let (en_kind, zh_kind) = match kind {
            BudgetKind::Tokens => ("token", "token"),
            BudgetKind::Cost => ("cost", "费用"),
            BudgetKind::Requests => ("request", "请求数"),
        };
        Some(match self {
            Lang::En => format!(
                "{en_level} {en_period} {en_kind} budget{} is used up",
                if model { " on a model" } else { "" }
            ),
            Lang::Zh => format!(
                "{zh_level}的{}{zh_period}{zh_kind}预算已用完",
                if model { "模型" } else { "" }
            ),
        })
    }
}

/// The English text of a key (the JSON API's messages).
pub fn english(key: &str) -> &'static str {
    Lang::En.t(key)
}

/// The keys of one area, in table order, each with its suffix: for
/// `"reason"`, (`"model_not_found"`, `"reason.model_not_found"`), ….
pub fn keys_in(area: &'static str) -> impl Iterator<Item = (&'static str, &'static str)> {
    TABLE.iter().filter_map(move |(k, _, _)| {
        k.strip_prefix(area)
            .and_then(|rest| rest.strip_prefix('.'))
            .filter(|rest| *rest != "other")
            .map(|rest| (rest, *k))
    })
}

fn lookup(key: &str) -> Option<(&'static str, &'static str)> {
    use std::collections::HashMap;
    use std::sync::OnceLock;
    static MAP: OnceLock<HashMap<&'static str, (&'static str, &'static str)>> = OnceLock::new();
    MAP.get_or_init(|| TABLE.iter().map(|(k, en, zh)| (*k, (*en, *zh))).collect())
        .get(key)
        .copied()
}

/// (key, English, Chinese). Keep sorted by area; add a row for every new
/// visible string (`cargo test -p tollgate-console` finds missing ones).
pub static TABLE: &[(&str, &str, &str)] = &[
    // layout and navigation
    ("nav.app_name", "tollgate console", "tollgate 控制台"),
    ("nav.dashboard", "Dashboard", "概览"),
    ("nav.tenants", "Tenants", "租户"),
    ("nav.apps", "Apps & keys", "应用与密钥"),
    ("nav.quota", "Quota requests", "临时额度申请"),
    ("nav.models", "Models & prices", "模型与价格"),
    ("nav.borrowing", "Borrowing", "借用额度"),
    ("nav.users", "Users", "用户"),
    ("nav.audit", "Audit log", "审计日志"),
    ("nav.requests", "Requests", "请求日志"),
    ("nav.logout", "Log out", "退出登录"),
    ("nav.menu", "Menu", "菜单"),
    ("nav.signed_in_as", "Signed in as", "当前用户"),
    ("nav.language", "Language", "语言"),
    ("lang.en", "English", "English"),
    ("lang.zh", "中文", "中文"),
    ("theme.auto", "Colours: as the system", "配色：跟随系统"),
    ("theme.light", "Colours: light", "配色：浅色"),
    ("theme.dark", "Colours: dark", "配色：深色"),
    ("common.save", "Save", "保存"),
    ("common.create", "Create", "创建"),
    ("common.search", "Search", "查询"),
    ("common.none", "none", "无"),
    ("common.unlimited", "unlimited", "不限"),
    ("common.all", "all", "全部"),
    ("common.yes", "yes", "是"),
    ("common.no", "no", "否"),
    ("common.back", "Back", "返回"),
    ("common.id", "ID", "ID"),
    ("common.name", "Name", "名称"),
    ("common.tenant", "Tenant", "租户"),
    ("common.app", "App", "应用"),
    ("common.state", "State", "状态"),
    ("common.time", "Time", "时间"),
    ("common.actions", "Actions", "操作"),
    ("common.empty", "Nothing here yet.", "暂无数据。"),
    ("common.done", "Done.", "已完成。"),
    // roles
    ("role.platform_admin", "Platform admin", "平台管理员"),
    ("role.tenant_admin", "Tenant admin", "租户管理员"),
    ("role.finance", "Finance", "财务"),
    ("role.auditor", "Auditor", "审计员"),
    // login
    ("login.title", "Sign in", "登录"),
    ("login.email", "Email", "邮箱"),
    ("login.password", "Password", "密码"),
    ("login.submit", "Sign in", "登录"),
    ("login.failed", "Wrong email or password.", "邮箱或密码错误。"),
    ("login.too_many", "Too many attempts; wait {secs} s and try again.", "尝试次数过多，请 {secs} 秒后再试。"),
    ("login.csrf", "This sign-in form has expired; please sign in again.", "登录表单已过期，请重新登录。"),
    ("login.password_off", "Password sign-in is turned off; sign in with SSO.", "密码登录已关闭，请使用单点登录。"),
    ("login.sso", "Sign in with SSO", "使用单点登录"),
    ("login.sso_failed", "Single sign-on did not complete; please try again.", "单点登录未完成，请重试。"),
    ("login.sso_no_role", "Your SSO account has no tollgate role; ask an administrator.", "您的单点登录账号没有 tollgate 角色，请联系管理员。"),
    // errors
    ("error.title", "Something went wrong", "出错了"),
    ("error.forbidden", "Your role may not do this.", "您的角色无权执行此操作。"),
    ("error.not_found", "Not found.", "未找到。"),
    ("error.no_such_tenant", "No such tenant: no tenant you may see has this id.", "没有此租户：您可查看的租户中没有这个编号。"),
    ("error.bad_request", "The request was not valid.", "请求无效。"),
    ("error.conflict", "It already exists or was changed meanwhile.", "已存在或已被修改。"),
    ("error.stale", "Someone changed this since you opened it. Reload the page to see the change, then make yours again.", "自您打开后，已有他人修改了此项。请刷新页面查看改动，然后重新修改。"),
    ("stale.title", "Changed since you opened it.", "自您打开后已被修改。"),
    ("stale.not_saved", "Your changes were not saved. Meanwhile:", "您的修改未保存。期间的改动："),
    ("stale.again", "The form still holds what you typed. Check it against the changes above; saving again replaces them with the form's values.", "表单仍保留您输入的内容。请对照上面的改动检查；再次保存将以表单中的值覆盖这些改动。"),
    ("error.csrf", "The form expired or did not come from this console. Reload the page and try again.", "表单已过期或并非来自本控制台，请刷新页面后重试。"),
    ("error.db_down", "The database is unreachable. The gateway keeps serving admitted traffic; the console is back as soon as PostgreSQL is.", "数据库无法连接。网关仍在处理已准入的请求；PostgreSQL 恢复后控制台即可使用。"),
    ("error.internal", "Internal error. It has been logged.", "内部错误，已记录日志。"),
    ("error.too_many", "Too many attempts; wait a minute.", "尝试次数过多，请稍候一分钟。"),
    // dashboard
    ("dash.tenants", "Tenants", "租户"),
    ("dash.pending", "Pending quota requests", "待审批额度申请"),
    ("dash.models", "Models", "模型"),
    ("dash.users", "Users", "用户"),
    ("dash.apps", "Apps", "应用"),
    ("dash.usage", "Usage this month", "本月用量"),
    ("dash.used_tokens", "Used tokens", "已用 token"),
    ("dash.held_tokens", "Held (in flight)", "预扣（进行中）"),
    ("dash.limit_tokens", "Token budget", "token 预算"),
    ("dash.cost", "Cost", "费用"),
    ("dash.limit_cost", "Cost budget", "费用预算"),
    ("dash.granted", "Active grants, tenant-wide (tokens)", "生效中的租户级临时授予（token）"),
    ("dash.effective", "Effective token limit", "有效 token 额度"),
    ("dash.base", "base", "基础"),
    ("dash.grants", "grants", "临时授予"),
    ("dash.borrowed", "borrowed", "借用"),
    ("tenants.active_grants", "Active temporary grants", "生效中的临时授予"),
    ("tenants.active_grants_note", "Approved quota requests in force now. A tenant-wide grant raises the tenant's budget (it is in the effective limit above); an app's grant raises that app's budget only.", "当前生效的已批准额度申请。租户级授予提高租户预算（已计入上方有效额度）；应用级授予只提高该应用的预算。"),
    ("tenants.applies_to", "Applies to", "适用于"),
    ("tenants.tenant_wide", "the whole tenant", "整个租户"),
    ("tenants.app_named", "app", "应用"),
    ("tenants.approved_by", "Approved by", "批准人"),
    ("tenants.no_grants", "No grant in force.", "当前没有生效的临时授予。"),
    // borrowing
    ("fair.title", "Fairness of", "公平调度设置："),
    ("fair.back", "← Models & prices", "← 模型与价格"),
    ("fair.saved", "Saved; requests admitted from now on follow it.", "已保存，此后接纳的请求按新设置执行。"),
    ("fair.guarantees", "Guaranteed slots of core tenants", "核心优先级租户的保底并发"),
    ("fair.note", "When every slot of the pool is taken, batch tenants wait first, standard ones next; a core tenant always gets its guaranteed slots. Over its budget share a tenant may be degraded to the cheaper model. The change is recorded in the audit log.", "并发池满时，批处理优先级的租户先等待，其次是标准优先级；核心优先级的租户始终获得其保底并发。超出预算份额的租户可能被降级到更便宜的模型。修改会记入审计日志。"),
    ("fair.core_tenants", "Core tenants:", "核心优先级租户："),
    ("fair.edit", "Fairness", "公平调度"),
    ("borrow.pool", "Shared pool", "共享额度池"),
    ("borrow.pool_tokens", "Monthly pool (tokens)", "每月额度池（token）"),
    ("borrow.pool_cost", "Monthly pool (cost)", "每月额度池（费用）"),
    ("borrow.no_pool", "no pool set", "未设置额度池"),
    ("borrow.lent", "Lent", "已借出"),
    ("borrow.outstanding", "Outstanding", "未归还"),
    ("borrow.free", "Free", "可借"),
    ("borrow.max_share", "Largest single borrow", "单次借用上限"),
    ("borrow.reclaim_below", "Reclaim when free below", "可借低于此比例时回收"),
    ("borrow.owed", "Outstanding per tenant", "各租户未归还额度"),
    ("borrow.tokens", "Tokens", "token"),
    ("borrow.history", "Borrows this month", "本月借用记录"),
    ("borrow.reclaims", "Reclaims", "回收记录"),
    ("borrow.at", "When", "时间"),
    ("borrow.state", "State", "状态"),
    ("borrow.trigger", "Why", "原因"),
    ("borrow.reason", "Reason", "原因"),
    ("borrow.saved", "The pool is saved; borrows from now on follow it.", "额度池已保存，此后的借用按新设置执行。"),
    ("borrow.edit", "Change the pool", "修改额度池"),
    ("borrow.edit_note", "Leave the pool sizes empty for no pool. Shares are percent of the monthly pool. The change is recorded in the audit log.", "额度池大小留空表示不设额度池。比例为每月额度池的百分比。修改会记入审计日志。"),
    ("borrow.note", "Reclaim takes back unused borrowed quota, lowest priority and longest-held first, never below what a tenant has used.", "回收只收回未使用的借用额度：优先级最低、借用最久者先回收，绝不低于租户已用量。"),
    ("dash.spend", "Spend", "花费"),
    ("dash.this_month", "This month", "本月"),
    ("dash.last_month", "Last month", "上月"),
    ("dash.month_to_date", "Spent this month so far", "本月至今花费"),
    ("dash.change", "Complete days against the same days of last month: days", "已结束的天数与上月同期相比：日期"),
    ("dash.no_complete_day", "first day: nothing to compare yet", "本月第一天，暂无可比数据"),
    ("dash.no_change", "no spend to compare", "上月同期无花费"),
    ("dash.forecast", "Forecast for the whole month", "本月全月预测"),
    ("dash.last_month_total", "All of last month", "上月全月"),
    ("dash.last_missing", "Last month's books could not be read (its archive is unavailable); it is shown as nothing spent.", "无法读取上月账目（归档不可用），上月按未花费显示。"),
    ("dash.trend", "Spend so far, day by day", "逐日累计花费"),
    ("dash.trend_note", "Solid: this month up to today; dashed: last month", "实线：本月至今；虚线：上月"),
    ("dash.top", "Biggest spenders this month", "本月花费最多的租户"),
    ("dash.share", "Share of this month", "占本月比例"),
    ("dash.requests", "Quota requests", "额度申请"),
    ("dash.recent_audit", "Recent changes", "最近变更"),
    ("dash.budgets_spent", "Budgets spent", "预算已用完"),
    ("dash.budgets_spent_note", "Requests are refused (HTTP 402) until the budget is raised — a grant, a new limit — or the month turns.", "在提高预算（临时授予或修改额度）或进入下个月之前，请求将被拒绝（HTTP 402）。"),
    ("dash.cost_spent", "cost budget spent", "费用预算已用完"),
    ("dash.tokens_spent", "token budget spent", "token 预算已用完"),
    // limits
    ("limits.monthly_tokens", "Monthly tokens", "每月 token"),
    ("limits.monthly_cost_usd", "Monthly cost (USD)", "每月费用（美元）"),
    ("limits.daily_cost_soft_usd", "Daily soft cost limit (USD)", "每日软性费用上限（美元）"),
    ("limits.rpm", "Requests per minute", "每分钟请求数"),
    ("limits.input_tpm", "Input tokens per minute", "每分钟输入 token"),
    ("limits.output_tpm", "Output tokens per minute", "每分钟输出 token"),
    ("limits.max_inflight", "Max in flight", "最大并发"),
    ("limits.max_context_tokens", "Max context tokens", "最大上下文 token"),
    ("limits.max_output_tokens", "Max output tokens", "最大输出 token"),
    ("limits.allowed_service_tiers", "Allowed service tiers (beyond the default)", "允许的服务等级（默认之外）"),
    ("limits.allowed_tools", "Allowed hosted tools", "允许的托管工具"),
    ("limits.budgets", "Budgets by period and model", "按周期和模型的预算"),
    // limits history and rollback
    ("limits.history", "Limits history", "限额历史"),
    ("limits.history_intro", "Every change of these limits, newest first, from the audit log. Restoring an earlier version puts its limits back in force within seconds and is itself recorded here and in the audit log.", "这些限额的每次变更（最新在前），取自审计日志。恢复较早的版本会在数秒内使其限额重新生效，恢复操作本身也会记录在此处和审计日志中。"),
    ("limits.of_app", "App", "应用"),
    ("limits.of_key", "Key", "密钥"),
    ("limits.above_intro", "Set higher than the scope around it — accepted, but the lower limit applies first, so this one cannot be reached:", "高于其上级范围的额度——已保存，但较低的上级额度先生效，因此这里的额度无法达到："),
    ("limits.above_outer", "above the limit of", "高于上级额度："),
    ("limits.back", "Back", "返回"),
    ("limits.when_zoned", "When ({zone})", "时间（{zone}）"),
    ("limits.who", "Who", "操作人"),
    ("limits.what", "What", "操作"),
    ("limits.changes", "Limits before → after", "限额 变更前 → 变更后"),
    ("limits.reason", "Reason", "原因"),
    ("limits.reason_hint", "why restore this version", "恢复此版本的原因"),
    ("limits.created", "Created", "创建"),
    ("limits.changed", "Changed", "修改"),
    ("limits.restored", "Restored an earlier version", "恢复了较早的版本"),
    ("limits.in_force", "in force", "当前生效"),
    ("limits.all_unlimited", "no limits set (unlimited)", "未设限额（不限）"),
    ("limits.restore", "Restore this version", "恢复此版本"),
    ("limits.saved_ok", "Limits saved; they bind within a second.", "限额已保存，一秒内生效。"),
    ("limits.edit", "Change the limits", "修改限额"),
    ("limits.key_revoked", "This key is revoked: its limits are shown as history and can no longer be changed.", "该密钥已吊销：其限额仅作历史展示，不能再修改。"),
    ("limits.edit_note", "Empty means no limit of its own at this level; the limits above it (app, tenant) still apply.", "留空表示本级不设限额；上级（应用、租户）的限额仍然生效。"),
    ("limits.restored_ok", "Restored: these limits are in force again.", "已恢复：这些限额已重新生效。"),
    // tenants
    ("tenants.new", "New tenant", "新建租户"),
    ("tenants.settings", "Settings", "设置"),
    ("tenants.cost_center", "Cost center", "成本中心"),
    ("tenants.priority", "Priority", "优先级"),
    ("tenants.limits", "Limits", "限额"),
    ("tenants.may_borrow", "May borrow from the pool", "可从共享池借用"),
    ("tenants.borrow_cap", "Borrow cap (tokens)", "借用上限（token）"),
    ("tenants.clamp", "Clamp max_tokens to the budget instead of refusing", "预算不足时压缩 max_tokens 而非拒绝"),
    ("tenants.max_queued", "Requests waiting in the queue at most (per replica)", "队列中最多等待的请求数（每个副本）"),
    ("tenants.max_streams", "Open streams at most (per replica)", "最多同时打开的流式响应数（每个副本）"),
    ("tenants.platform_default", "platform default", "平台默认值"),
    ("tenants.allowed_models", "Allowed models", "允许的模型"),
    ("tenants.all_models", "all models (comma-separated list to restrict)", "全部模型（填写逗号分隔列表以限制）"),
    // apps & keys
    ("apps.edit", "Edit app", "编辑应用"),
    ("apps.default_tags", "Default tags of its requests", "请求的默认标签"),
    ("apps.required_tags", "Tags every request must carry", "每个请求必须携带的标签"),
    ("apps.edit_note", "Limits change on the app's limits page. Requests carry their own tags in the x-tollgate-tags header or the body's metadata; those win over the defaults. The change is recorded in the audit log.", "额度在应用的额度页修改。请求可在请求头或请求体中携带自己的标签，优先于默认标签。修改会记入审计日志。"),
    ("apps.pick", "Choose a tenant:", "请选择租户："),
    ("apps.new", "New app", "新建应用"),
    ("apps.none", "This tenant has no apps yet.", "该租户还没有应用。"),
    ("apps.no_keys", "No keys yet.", "还没有密钥。"),
    ("apps.spend_month", "Spend this month", "本月花费"),
    ("apps.key_limits", "Limits for this key (optional; its app's and tenant's apply as well)", "此密钥的限额（可选；其应用和租户的限额同样生效）"),
    ("apps.last_used", "Last used (day, platform time)", "最近使用（日期，平台时区）"),
    ("apps.not_used", "not in two months", "近两个月未使用"),
    ("apps.never_used", "never", "从未使用"),
    ("apps.created_ok", "App created; issue its first key below:", "应用已创建，可在下方签发第一个密钥："),
    ("apps.requests", "requests", "次请求"),
    ("apps.prefix", "Key prefix", "密钥前缀"),
    ("apps.created", "Created", "创建时间"),
    ("apps.expires", "Expires", "过期时间"),
    ("apps.expires_zoned", "Expires ({zone}, optional)", "过期时间（{zone}，可选）"),
    ("apps.active", "active", "有效"),
    ("apps.revoked", "revoked", "已吊销"),
    ("apps.revoke", "Revoke", "吊销"),
    ("apps.rotate", "Rotate", "轮换"),
    ("apps.rotate_confirm", "Give this key a new secret? The current one keeps working for the grace period chosen, then its clients get 401.", "为此密钥生成新密钥串？当前密钥串在所选宽限期内仍可用，之后其客户端将收到 401。"),
    ("apps.grace", "old secret works for", "旧密钥串可用"),
    ("apps.grace_none", "no grace (stops now)", "无宽限（立即失效）"),
    ("apps.grace_hour", "1 hour", "1 小时"),
    ("apps.grace_day", "24 hours", "24 小时"),
    ("apps.grace_week", "7 days", "7 天"),
    ("apps.rotated", "Key rotated:", "密钥已轮换："),
    ("apps.previous_secret", "previous secret", "旧密钥串"),
    ("apps.works_until", "works until", "可用至"),
    ("apps.previous_stopped", "The previous secret stopped working:", "旧密钥串已失效："),
    ("apps.rotated_at", "rotated", "轮换于"),
    ("apps.in_grace", "rotating", "轮换中"),
    ("apps.edit_key", "Edit", "编辑"),
    ("apps.search_keys", "Search keys by name", "按名称搜索密钥"),
    ("apps.show_revoked", "Show revoked keys", "显示已吊销的密钥"),
    ("apps.filter_keys", "Show", "显示"),
    ("apps.hidden_revoked", "Revoked keys hidden:", "已隐藏的吊销密钥："),
    ("apps.revoke_confirm", "Revoke this key? Clients using it stop working within a second.", "确定吊销此密钥？使用它的客户端将在一秒内失效。"),
    ("apps.key_name", "Key name", "密钥名称"),
    ("apps.issue", "Issue key", "签发密钥"),
    ("apps.issued", "Key issued:", "密钥已签发："),
    ("apps.shown_once", "Copy it now: it is shown only this once and stored only as a hash.", "请立即复制：密钥只显示这一次，系统仅保存其哈希。"),
    ("apps.done_copying", "I have copied it", "我已复制"),
    // quota requests
    ("quota.help", "Temporary quota raises a budget until it expires. A platform admin other than the requester approves it.", "临时额度在到期前提高预算，需由申请人以外的平台管理员审批。"),
    ("quota.new", "Request temporary quota", "申请临时额度"),
    ("quota.created", "Request sent; a platform admin will decide.", "申请已提交，等待平台管理员审批。"),
    ("quota.app_optional", "App (optional)", "应用（可选）"),
    ("quota.tokens", "Tokens", "token 数"),
    ("quota.cost_usd", "Cost (USD)", "费用（美元）"),
    ("quota.expires_at", "Expires", "到期时间"),
    ("quota.pick_tenant", "— choose a tenant —", "— 选择租户 —"),
    ("quota.whole_tenant", "— the whole tenant —", "— 整个租户 —"),
    ("quota.expires_zoned", "Expires ({zone})", "到期时间（{zone}）"),
    ("quota.reason", "Reason", "理由"),
    ("quota.submit", "Send request", "提交申请"),
    ("quota.left", "Time left", "剩余时间"),
    ("quota.note", "Note", "备注"),
    ("quota.approve", "Approve", "批准"),
    ("quota.reject", "Reject", "拒绝"),
    ("quota.state_pending", "pending", "待审批"),
    ("quota.state_active", "active", "生效中"),
    ("quota.state_expired", "expired", "已过期"),
    ("quota.state_rejected", "rejected", "已拒绝"),
    ("quota.amount_tokens", "{n} tokens", "{n} token"),
    ("quota.already_approved", "The request of {who} for {amount} was already approved by {by} at {at} (in another tab or by another admin). Its row now shows it; nothing was changed.", "{who} 申请 {amount} 的请求已由 {by} 于 {at} 批准（在其他标签页或由其他管理员）。该行已更新为当前状态，本次操作未做任何修改。"),
    ("quota.already_rejected", "The request of {who} for {amount} was already rejected by {by} at {at} (in another tab or by another admin). Its row now shows it; nothing was changed.", "{who} 申请 {amount} 的请求已由 {by} 于 {at} 拒绝（在其他标签页或由其他管理员）。该行已更新为当前状态，本次操作未做任何修改。"),
    ("quota.already_changed", "The request of {who} for {amount} is no longer pending. Its row now shows it; nothing was changed.", "{who} 申请 {amount} 的请求已不再待审批。该行已更新为当前状态，本次操作未做任何修改。"),
    ("apps.already_revoked", "Key “{name}” was already revoked at {at} (in another tab or by someone else). Its row now shows it; nothing was changed.", "密钥“{name}”已于 {at} 被吊销（在其他标签页或由其他人）。该行已更新为当前状态，本次操作未做任何修改。"),
    // models
    ("models.new", "New model", "新建模型"),
    ("models.kind", "Kind", "类型"),
    ("models.upstream", "Upstream base URL", "上游地址"),
    ("models.upstream_model", "Upstream model", "上游模型名"),
    ("models.api_key", "Provider API key (write-only)", "供应商 API 密钥（只写）"),
    ("models.key_again", "not kept: type the key again", "未保留：请重新输入密钥"),
    ("models.input_price", "Input price / 1M tokens (USD)", "输入价格 / 百万 token（美元）"),
    ("models.output_price", "Output price / 1M tokens (USD)", "输出价格 / 百万 token（美元）"),
    ("models.default_max_output", "Default max output tokens", "默认最大输出 token"),
    ("models.degrade_to", "Degrades to", "降级到"),
    ("models.pool", "Pool capacity", "池容量"),
    ("models.deployments", "Deployments and health (this replica)", "部署与健康状况（本副本）"),
    ("models.deployment", "Deployment", "部署"),
    ("models.weight", "Weight", "权重"),
    ("models.priority", "Priority (0 = best)", "优先级（0 最高）"),
    ("models.max_inflight", "Max in flight", "最大并发"),
    ("models.health", "Health", "健康状况"),
    ("models.disable", "Disable", "停用"),
    ("models.enable", "Enable", "启用"),
    ("models.disabled", "disabled", "已停用"),
    ("models.pick_model", "— choose a model —", "— 选择模型 —"),
    ("models.model_off", "The whole model is disabled: none of its deployments is used", "整个模型已停用：其所有部署均不使用"),
    ("models.deployment_put", "Add or edit a deployment", "添加或编辑部署"),
    ("models.deployment_refused", "The deployment was not saved: see the fields marked below. Everything typed is kept, the provider key too.", "部署未保存：请查看下方标出的字段。已填写的内容（包括供应商密钥）均已保留。"),
    ("models.deployment_note", "A deployment with the name of an existing one edits it; an empty key keeps the stored key.", "与已有部署同名即为编辑；密钥留空则保留原密钥。"),
    ("models.profile", "Provider profile", "供应商特性"),
    ("models.cap_field", "Cap field the provider reads", "供应商读取的输出上限字段"),
    ("models.hidden_reasoning", "Hidden reasoning", "隐藏推理"),
    ("models.suggested", "as the upstream name suggests", "按上游模型名推荐"),
    ("models.profile_note", "The gateway sends the output cap it holds in the field the provider reads; a model with hidden reasoning holds its whole cap for a stream. See docs/providers.md.", "网关把它预留的输出上限写入供应商读取的字段；隐藏推理的模型在流式请求开始时预留全部上限。参见 docs/providers.md。"),
("models.prices_saved", "New prices saved for", "已保存新价格："),
    ("models.price_change_note", "A new price applies to requests admitted from now on; what is already booked keeps its cost.", "新价格适用于此后准入的请求；已入账的费用保持不变。"),
        ("models.price_note", "Prices are per million tokens; cost rounds up to the micro-dollar.", "价格按每百万 token 计；费用向上取整到微美元。"),
    // users
    ("users.new", "New user", "新建用户"),
    ("users.role", "Role", "角色"),
    ("users.change_role", "Change role", "修改角色"),
    ("users.tenant_for_ta", "Tenant (tenant admins only)", "租户（仅租户管理员）"),
    ("users.active", "active", "正常"),
    ("users.disabled", "disabled", "已停用"),
    ("users.disable", "Disable", "停用"),
    ("users.enable", "Enable", "启用"),
    ("users.new_password", "New password", "新密码"),
    ("users.set_password", "Set password", "设置密码"),
    ("users.own_row", "your own account", "您自己的账号"),
    ("users.done_disabled", "User disabled; their sessions ended.", "用户已停用，其所有会话已结束。"),
    ("users.done_enabled", "User enabled.", "用户已启用。"),
    ("users.done_password", "Password set; their sessions ended, they sign in with the new one.", "密码已设置；其所有会话已结束，需用新密码登录。"),
    // audit
    ("audit.actor", "Actor", "操作人"),
    ("audit.action", "Action", "操作"),
    ("audit.target", "Target", "对象"),
    ("audit.change", "Before → after", "变更前 → 变更后"),
    ("audit.from_zoned", "From ({zone})", "起（{zone}）"),
    ("audit.to_zoned", "To ({zone})", "止（{zone}）"),
    ("audit.chain", "Hash chain", "哈希链"),
    ("audit.verify", "Verify chain", "校验哈希链"),
    ("audit.intact", "The chain is intact", "哈希链完整"),
    ("audit.rows", "rows", "行"),
    ("audit.broken", "The chain is broken at row", "哈希链在此行断裂："),
    ("audit.newest", "← Newest", "← 最新"),
    ("audit.older", "Older →", "更早 →"),
    // audit: what each action did (the stored action is the row's
    // data-action and its cell's title)
    ("action.adjustment.propose", "adjustment proposed", "提出调整"),
    ("action.adjustment.approve", "adjustment approved", "批准调整"),
    ("action.adjustment.reject", "adjustment rejected", "驳回调整"),
    ("action.adjustment.four_eyes_refused", "adjustment decision refused (four eyes)", "调整决定被拒（双人复核）"),
    ("action.app.create", "app created", "创建应用"),
    ("action.app.update", "app changed", "修改应用"),
    ("action.app.limits", "app limits changed", "修改应用限额"),
    ("action.app.limits_restore", "app limits restored", "恢复应用限额"),
    ("action.auth.login_failed", "sign-in failed", "登录失败"),
    ("action.auth.sso_refused", "single sign-on refused", "单点登录被拒"),
    ("action.borrow.grant", "borrowing granted", "批准借用"),
    ("action.borrow.reclaim", "borrowing reclaimed", "收回借用"),
    ("action.grant.expire", "quota grant expired", "临时额度到期"),
    ("action.key.create", "key issued", "签发密钥"),
    ("action.key.load", "keys loaded", "导入密钥"),
    ("action.key.revoke", "key revoked", "撤销密钥"),
    ("action.key.rotate", "key rotated", "轮换密钥"),
    ("action.key.update", "key changed", "修改密钥"),
    ("action.key.limits", "key limits changed", "修改密钥限额"),
    ("action.key.limits_restore", "key limits restored", "恢复密钥限额"),
    ("action.model.create", "model added", "添加模型"),
    ("action.model.deployment", "model deployment set", "设置模型部署"),
    ("action.model.enabled", "model enabled or disabled", "启用或停用模型"),
    ("action.model.fairness", "model fairness set", "设置模型公平调度"),
    ("action.model.price_sheet", "price sheet set", "设置价目表"),
    ("action.model.prices", "model prices changed", "修改模型价格"),
    ("action.model.profile", "model provider profile set", "设置模型供应商配置"),
    ("action.model.routing", "model routing set", "设置模型路由"),
    ("action.model.upstream", "model upstream changed", "修改模型上游"),
    ("action.model_alias.create", "model alias added", "添加模型别名"),
    ("action.model_alias.update", "model alias changed", "修改模型别名"),
    ("action.model_alias.delete", "model alias removed", "删除模型别名"),
    ("action.month.close", "month closed", "月度结账"),
    ("action.month.purge", "month purged", "清除月度明细"),
    ("action.pool.update", "borrowing pool changed", "修改借用池"),
    ("action.provider_account.create", "provider account added", "添加供应商账户"),
    ("action.provider_account.update", "provider account changed", "修改供应商账户"),
    ("action.quota_request.create", "quota requested", "申请临时额度"),
    ("action.quota_request.approve", "quota request approved", "批准临时额度申请"),
    ("action.quota_request.reject", "quota request rejected", "驳回临时额度申请"),
    ("action.quota_request.four_eyes_refused", "quota decision refused (four eyes)", "临时额度决定被拒（双人复核）"),
    ("action.tenant.create", "tenant created", "创建租户"),
    ("action.tenant.update", "tenant changed", "修改租户"),
    ("action.tenant.limits", "tenant limits changed", "修改租户限额"),
    ("action.tenant.limits_restore", "tenant limits restored", "恢复租户限额"),
    ("action.user.create", "user added", "添加用户"),
    ("action.user.role_change", "user role changed", "修改用户角色"),
    ("action.user.sso_link", "user linked to single sign-on", "用户关联单点登录"),
    ("action.user.disable", "user disabled", "停用用户"),
    ("action.user.enable", "user enabled", "启用用户"),
    ("action.user.password_reset", "password reset", "重置密码"),
    ("action.user.password_change", "password changed", "修改密码"),
    // audit: what an entry acted on, by kind (then its name)
    ("target.tenant", "tenant", "租户"),
    ("target.key", "key", "密钥"),
    ("target.keys_n", "{n} keys", "{n} 个密钥"),
    ("target.quota_request_of", "quota request of {tenant}", "{tenant} 的临时额度申请"),
    ("target.model", "model", "模型"),
    ("target.model_alias", "model alias", "模型别名"),
    ("target.user", "user", "用户"),
    ("target.quota_request", "quota request", "临时额度申请"),
    ("target.period", "month", "月份"),
    ("target.pool", "borrowing pool", "借用池"),
    ("target.adjustment", "adjustment", "调整"),
    ("target.provider_account", "provider account", "供应商账户"),
    ("target.replica", "replica", "副本"),
    ("target.sso", "identity provider", "身份提供方"),
    ("target.job", "job", "任务"),
    // audit: the fields an entry changed
    ("field.name", "Name", "名称"),
    ("field.tenant_id", "Tenant", "租户"),
    ("field.tenant", "Tenant", "租户"),
    ("field.app_id", "App", "应用"),
    ("field.app", "App", "应用"),
    ("field.cost_center", "Cost center", "成本中心"),
    ("field.priority", "Priority", "优先级"),
    ("field.may_borrow", "May borrow", "允许借用"),
    ("field.borrow_cap_tokens", "Borrowing cap (tokens)", "借用上限（token）"),
    ("field.allowed_models", "Allowed models", "允许的模型"),
    ("field.clamp_max_tokens", "Clamp max_tokens", "压低 max_tokens"),
    ("field.max_queued_requests", "Most queued requests", "最多排队请求"),
    ("field.max_open_streams", "Most open streams", "最多同时打开的流"),
    ("field.prefix", "Key prefix", "密钥前缀"),
    ("field.expires_at", "Expires", "到期时间"),
    ("field.state", "State", "状态"),
    ("field.kind", "Kind", "类型"),
    ("field.upstream_base_url", "Upstream URL", "上游地址"),
    ("field.upstream_model", "Upstream model", "上游模型"),
    ("field.has_upstream_api_key", "Has an upstream API key", "已设上游 API 密钥"),
    ("field.input_price_micro_per_mtok", "Input price per 1M tokens", "每百万输入 token 价格"),
    ("field.output_price_micro_per_mtok", "Output price per 1M tokens", "每百万输出 token 价格"),
    ("field.cap_field", "Output cap parameter", "输出上限参数"),
    ("field.hidden_reasoning", "Hidden reasoning", "隐藏推理"),
    ("field.apis", "APIs", "API"),
    ("field.email", "Email", "邮箱"),
    ("field.role", "Role", "角色"),
    ("field.disabled", "Disabled", "已停用"),
    ("field.sessions_ended", "Sessions ended", "已结束的会话"),
    ("field.enabled", "Enabled", "已启用"),
    ("field.tokens", "Tokens", "token 数"),
    ("field.cost_micro", "Cost", "费用"),
    ("field.reason", "Reason", "原因"),
    ("field.note", "Note", "备注"),
    ("field.requested_by", "Requested by", "申请人"),
    ("field.decided_by", "Decided by", "决定人"),
    ("field.decided_at", "Decided", "决定时间"),
    ("field.created_at", "Created", "创建时间"),
    ("field.proposed_by", "Proposed by", "提出人"),
    ("field.active", "In force", "生效中"),
    ("field.version", "Version", "版本"),
    ("field.why", "Why", "原因"),
    ("field.decision", "Decision", "决定"),
    ("field.period", "Month", "月份"),
    ("field.events", "Events", "事件数"),
    ("field.batch_id", "Archive batch", "归档批次"),
    ("field.end_user", "End user", "终端用户"),
    ("field.session", "Session", "会话"),
    ("field.required_tags", "Required tags", "必填标签"),
    ("field.tag_named", "Tag {tag}", "标签 {tag}"),
    ("field.end_users_per_minute", "New end users per minute", "每分钟新终端用户数"),
    ("field.rpm", "Requests per minute", "每分钟请求数"),
    ("field.monthly_tokens", "Monthly tokens", "每月 token"),
    ("field.monthly_cost_usd", "Monthly cost", "每月费用"),
    // request lookup
    ("req.tag", "Tag", "标签"),
    ("req.tag_format", "key=value", "键=值"),
    ("req.end_user", "End user", "终端用户"),
    ("req.per", "Rows per page", "每页行数"),
    ("req.id_label", "Request id (x-request-id)", "请求 ID（x-request-id）"),
    ("req.help", "Every answer of the gateway carries x-request-id. Refused and degraded requests show their reason and the counters at the time; admitted ones their usage.", "网关的每个响应都带有 x-request-id。被拒绝或降级的请求显示原因及当时的计数；已准入的请求显示用量。"),
    ("req.not_found", "No request with this id (or not one your role may see).", "没有此 ID 的请求（或您的角色无权查看）。"),
    ("req.refused", "refused", "已拒绝"),
    ("req.degraded", "degraded", "已降级"),
    ("req.admitted", "admitted", "已准入"),
    ("req.queued", "Waited in the queue", "在队列中等待"),
    ("req.reason", "Reason", "原因"),
    ("req.status", "HTTP status", "HTTP 状态码"),
    ("req.scope", "Failing scope", "触发限制的范围"),
    ("req.at", "At", "时间"),
    ("req.key", "Key", "密钥"),
    ("req.model", "Model", "模型"),
    ("req.counters", "Counters at the time", "当时的计数"),
    ("req.input_tokens", "Input tokens", "输入 token"),
    ("req.output_tokens", "Output tokens", "输出 token"),
    ("req.cost", "Cost", "费用"),
    ("req.asked_model", "Model asked for", "请求的模型名"),
    ("req.session", "Agent session", "智能体会话"),
    ("req.exact_cost", "Exact cost", "精确费用"),
    ("req.charges", "Charged for", "计费明细"),
    ("req.served_tier", "Served at service tier", "实际服务等级"),
    ("req.usage_status", "Settled as", "结算状态"),
    ("req.usage_anomaly", "Usage anomaly (billed at the bound)", "用量异常（按上限计费）"),
    ("req.reported_usage", "Usage the provider reported", "供应商报告的用量"),
    ("req.raw_usage", "Provider's usage object, as sent", "供应商发送的原始用量对象"),
    // field messages (ApiError::Field keys)
    ("err.id_format", "1-64 characters of a-z, 0-9, '-' and '_'", "1-64 个字符，仅限 a-z、0-9、'-' 和 '_'"),
    ("err.required", "required", "必填"),
    ("err.exists", "already exists", "已存在"),
    ("err.not_a_number", "must be a whole number", "必须是整数"),
    ("err.per_range", "must be from 1 to 500", "必须在 1 到 500 之间"),
    ("err.not_money", "must be an amount in USD, like 12.50", "必须是美元金额，例如 12.50"),
    ("err.negative", "must not be negative", "不能为负数"),
    ("err.positive", "must be at least 1 (leave blank for the platform default)", "至少为 1（留空则使用平台默认值）"),
    ("err.name_list", "at most 32 names, each 1 to 32 letters, digits, '_' or '-'", "最多 32 个名称，每个 1 到 32 个字母、数字、'_' 或 '-'"),
    ("err.priority", "must be core, standard or batch", "必须是 core、standard 或 batch"),
    ("err.past", "must be in the future", "必须是将来的时间"),
    ("quota.max_days", "A temporary grant runs at most {n} days: until {until} at the latest.", "临时授予最长 {n} 天：最晚到 {until}。"),
    ("err.grant_too_long", "too far ahead: see the longest a temporary grant may run, just above", "太远：临时授予的最长期限见上方说明"),
    ("err.grace_range", "must be 0 to 604,800 seconds (seven days)", "须在 0 到 604,800 秒（七天）之间"),
    ("err.positive_amount", "ask for a positive number of tokens and/or USD", "请申请正数的 token 和/或美元额度"),
    ("err.bad_time", "must be a date and time like 2026-12-31T18:00", "必须是日期时间，例如 2026-12-31T18:00"),
    ("err.from_after_to", "From is after To: nothing can match", "起始时间晚于结束时间，没有可匹配的记录"),
    ("err.filter_refused", "Nothing is shown until the filter is corrected (see the messages beside the fields).", "请先按字段旁的提示修改筛选条件，修改前不显示记录。"),
    ("err.unknown_app", "no such app in this tenant", "该租户下没有此应用"),
    ("err.unknown_tenant", "no such tenant", "没有此租户"),
    ("err.role", "unknown role", "未知角色"),
    ("err.tenant_needed", "a tenant admin needs a tenant", "租户管理员必须属于一个租户"),
    ("err.tenant_only_for_ta", "only tenant admins belong to a tenant", "只有租户管理员属于租户"),
    ("err.email", "not an email address", "不是有效的邮箱地址"),
    ("err.password_short", "at least 12 characters", "至少 12 个字符"),
    ("err.own_role", "nobody changes their own role", "不能修改自己的角色"),
    ("err.url", "must be an http(s) URL without credentials", "必须是不含凭据的 http(s) 地址"),
    ("err.kind", "must be chat or embedding", "必须是 chat 或 embedding"),
    ("err.cap_field", "must be max_tokens, max_completion_tokens or both", "必须是 max_tokens、max_completion_tokens 或两者"),
    ("err.model_id_format", "1-128 characters of letters, digits, '.', '_', ':', '/' and '-', starting with a letter or digit", "1-128 个字符，仅限字母、数字、'.'、'_'、':'、'/' 和 '-'，且以字母或数字开头"),
    ("err.yes_no", "must be yes or no", "必须是“是”或“否”"),
    ("err.tokenizer", "must be o200k, cl100k or other", "必须是 o200k、cl100k 或 other"),
    ("err.unknown_model", "unknown model", "未知模型"),
    ("err.budget_text", "reads like: month on gpt-4o,o3 cost=500; day requests=100 (a period, optionally 'on' and models, then tokens=, cost= in USD or requests=)", "格式如：month on gpt-4o,o3 cost=500; day requests=100（周期，可选 'on' 加模型，然后 tokens=、cost=（美元）或 requests=）"),
    ("err.budget", "a budget needs a period (day, week, month or quarter), at least one of tokens, cost or requests, none negative, at most 16 distinct models, and no other budget of the same period and models (at most 16 budgets)", "预算需要周期（day、week、month 或 quarter），至少设置 tokens、cost 或 requests 之一且不能为负，最多 16 个不重复的模型，且不能与另一预算的周期和模型相同（最多 16 个预算）"),
    ("err.unknown_budget_model", "names a model this gateway does not serve (see Models & prices)", "包含本网关未提供的模型（见“模型与价格”页）"),
    ("err.unknown_allowed_model", "names a model this gateway does not serve (see Models & prices)", "包含本网关未提供的模型（见“模型与价格”页）"),
    // billing
    ("nav.bills", "Bills", "账单"),
    ("nav.jobs", "Jobs", "后台任务"),
    ("nav.reconciliation", "Reconciliation", "供应商对账"),
    ("nav.notices", "Notices", "通知"),
    ("nav.analytics", "Usage analytics", "用量分析"),
    // usage analytics
    ("analytics.range", "Range", "时间范围"),
    ("analytics.last_7", "Last 7 days", "最近 7 天"),
    ("analytics.last_30", "Last 30 days", "最近 30 天"),
    ("analytics.custom", "Custom (From – To)", "自定义（起 – 止）"),
    ("analytics.from", "From (day)", "起始日"),
    ("analytics.to", "To (day, included)", "截止日（含）"),
    ("analytics.custom_note", "From and To are read when the range is Custom; the last 7 or 30 days end today. At most 366 days.", "仅当时间范围为“自定义”时读取起始日和截止日；最近 7 天或 30 天截至今天。最长 366 天。"),
    ("analytics.group", "Group by", "分组方式"),
    ("analytics.by_key", "Key", "密钥"),
    ("analytics.by_app", "App", "应用"),
    ("analytics.by_model", "Model", "模型"),
    ("analytics.by_tag", "Tag value", "标签值"),
    ("analytics.by_end_user", "End user", "终端用户"),
    ("analytics.tag", "Tag key (to group by tag)", "标签键（按标签分组时）"),
    ("analytics.top", "Top", "显示前几名"),
    ("analytics.show", "Show", "查看"),
    ("analytics.days", "Days", "日期"),
    ("analytics.days_unit", "days", "天"),
    ("analytics.days_in", "days are calendar days in", "日期按以下时区的自然日计算："),
    ("analytics.purged", "These months were archived and their ledger purged, so their days are not in these figures (their bills are on the Bills page):", "以下月份已归档并清除了明细账，其日期不计入本页数字（账单见“账单”页）："),
    ("analytics.refused", "Nothing is shown until the form is corrected (see the messages beside the fields).", "请先按字段旁的提示修改表单，修改前不显示数据。"),
    ("analytics.spend", "Spend", "花费"),
    ("analytics.requests", "Requests", "请求数"),
    ("analytics.input", "Input tokens", "输入 token"),
    ("analytics.output", "Output tokens", "输出 token"),
    ("analytics.spend_per_day", "Spend per day (USD)", "每日花费（USD）"),
    ("analytics.requests_per_day", "Requests per day", "每日请求数"),
    ("analytics.tokens_per_day", "Tokens per day", "每日 token 数"),
    ("analytics.chart_note", "Spend is the charged cost summed from the ledger; hover a dot for the day's exact figure, or see the table below", "花费为明细账中计费金额之和；将指针悬停在圆点上可查看当天的精确数字，或见下表"),
    ("analytics.top_title", "Top groups of the range", "该时间范围内的前几名"),
    ("analytics.share", "Share of spend", "花费占比"),
    ("analytics.others", "All others", "其余合计"),
    ("analytics.none", "(none)", "（无）"),
    ("analytics.per_day", "Per day", "按天"),
    ("analytics.err_date", "must be a day like 2026-12-31", "必须是日期，例如 2026-12-31"),
    ("analytics.err_from_after_to", "From is after To: choose a From on or before the To", "起始日晚于截止日：请选择不晚于截止日的起始日"),
    ("analytics.err_too_long", "the range is longer than 366 days", "时间范围超过 366 天"),
    ("analytics.err_range", "must be the last 7 days, the last 30 days or Custom", "必须是最近 7 天、最近 30 天或自定义"),
    ("analytics.err_group", "must be key, app, model, tag value or end user", "必须是密钥、应用、模型、标签值或终端用户"),
    ("analytics.err_tag", "a tag key starts with a lowercase letter (a-z, 0-9, '_', '-', '.')", "标签键以小写字母开头（a-z、0-9、'_'、'-'、'.'）"),
    ("analytics.err_tag_needed", "name the tag key to group by", "请填写要分组的标签键"),
    ("analytics.err_top", "must be 5, 10 or 25", "必须是 5、10 或 25"),
    ("analytics.err_tenant", "no such tenant", "没有此租户"),
    ("bills.period", "Month", "月份"),
    ("bills.all", "All tenants", "全部租户"),
    ("bills.csv", "CSV export", "导出 CSV"),
    ("bills.focus", "FOCUS export", "导出 FOCUS"),
    ("bills.requests", "Requests", "请求数"),
    ("bills.input", "Input tokens", "输入 token"),
    ("bills.output", "Output tokens", "输出 token"),
    ("bills.cost", "Cost", "费用"),
    ("bills.borrowed", "Borrowed tokens", "借用 token"),
    ("bills.granted", "Grants approved this month, tenant and apps (tokens)", "本月批准的临时授予，含租户及应用（token）"),
    ("bills.refused", "Refused by reason", "按原因拒绝"),
    ("bills.total", "Total", "合计"),
    ("bills.drill", "Drill down", "下钻"),
    ("bills.by_app", "by app", "按应用"),
    ("bills.by_model", "by model", "按模型"),
    ("bills.by_day", "by day", "按天"),
    ("prices.title", "Price sheets of", "价格表："),
    ("prices.link", "Price sheets", "价格表"),
    ("prices.note", "Prices per million tokens (web search: per call, in the sheet's tool fees). A request is priced by the sheet in force when it was received; a sheet is never changed, a new price is a new sheet, so this list is the history.", "价格按每百万 token 计（网页搜索按次，见价格表的工具费用）。请求按收到时生效的价格表计价；价格表从不修改，新价格即新价格表，因此本列表就是历史。"),
    ("prices.from", "Effective from", "生效时间"),
    ("prices.deployment", "Deployment", "部署"),
    ("prices.all_deployments", "all deployments", "所有部署"),
    ("prices.more", "Tiers, service tiers, fees, multiplier", "阶梯、服务等级、费用、系数"),
    ("prices.by", "Added by", "添加人"),
    ("prices.in_force", "in force", "生效中"),
    ("prices.scheduled", "scheduled", "待生效"),
    ("prices.none", "No dated sheet: the model's two prices apply.", "没有定时价格表：使用模型的两个价格。"),
    ("prices.add", "Add a price sheet", "添加价格表"),
    ("prices.sheet", "Sheet (JSON, µUSD per million tokens)", "价格表（JSON，每百万 token 的微美元）"),
    ("prices.form_note", "A sheet's fields are these. An empty time means now. Every sheet added is audited.", "价格表的字段如下。时间留空即现在。每次添加都会记入审计。"),
    ("prices.saved", "The sheet was added.", "价格表已添加。"),
    ("bills.by_component", "by charge component", "按计费项"),
    ("bills.component", "Charge component", "计费项"),
    ("bills.quantity", "Quantity", "数量"),
    ("component.input", "Input (uncached)", "输入（未缓存）"),
    ("component.cached_input", "Cached input (cache read)", "缓存输入（缓存读取）"),
    ("component.cache_write_5m", "Cache write, 5 minutes", "缓存写入（5 分钟）"),
    ("component.cache_write_1h", "Cache write, 1 hour", "缓存写入（1 小时）"),
    ("component.cache_write_30m", "Cache write, 30 minutes (OpenAI)", "缓存写入（30 分钟，OpenAI）"),
    ("component.cache_write_12h", "Cache write, 12 hours (OpenAI)", "缓存写入（12 小时，OpenAI）"),
    ("component.audio_input", "Audio input", "音频输入"),
    ("component.image_input", "Image input", "图像输入"),
    ("component.output", "Output (reasoning included)", "输出（含推理）"),
    ("component.audio_output", "Audio output", "音频输出"),
    ("component.image_output", "Image output", "图像输出"),
    ("component.web_search", "Web search calls", "网页搜索调用"),
    ("component.unsplit", "Not split (earlier or expired requests)", "未拆分（早期或过期请求）"),
    ("unit.tokens", "tokens", "token"),
    ("unit.calls", "calls", "次"),
    ("bills.model", "Model", "模型"),
    ("bills.day", "Day", "日期"),
    ("bills.daily_spend", "Daily spend per tenant", "各租户每日花费"),
    ("bills.burndown", "Budget burn-down with forecast:", "预算消耗与预测："),
    ("bills.budget", "Monthly budget", "月度预算"),
    ("bills.forecast", "Forecast month-end spend", "预测月底花费"),
    ("bills.no_budget", "No monthly cost budget to burn down.", "未设置月度费用预算。"),
    ("bills.remaining", "Budget remaining", "剩余预算"),
    ("bills.budget_grants", "including approved grants of", "含已批准的临时额度"),
    ("bills.forecast_days", "The forecast is based on the average spend of the complete days so far:", "预测依据：本月已完整结束的天数的日均花费，天数："),
    ("bills.forecast_days_unit", "days", "天"),
    ("bills.forecast_today", "First day of the month: the forecast is today's spend so far, at its rate, for every day of the month; hours of today counted:", "本月第一天：预测按今天迄今的花费速率推算到整月，已计入今天的小时数："),
    ("bills.forecast_hours_unit", "h (at least 1)", "小时（至少按 1 小时计）"),
    ("jobs.reconcile", "Latest reconcile check", "最近一次对账检查"),
    ("jobs.no_diff", "The books agree.", "账目一致。"),
    ("jobs.scope", "Scope", "范围"),
    ("jobs.field", "Field", "字段"),
    ("jobs.months", "Month rollover", "月度结转"),
    ("jobs.events", "Events", "事件数"),
    ("jobs.closed_at", "Closed", "结账时间"),
    ("jobs.purge_after", "Postgres rows kept until", "Postgres 数据保留至"),
    ("jobs.runs", "Job runs", "任务运行记录"),
    ("jobs.job", "Job", "任务"),
    ("jobs.started", "Started", "开始"),
    ("jobs.finished", "Finished", "结束"),
    ("jobs.outcome", "Outcome", "结果"),
    ("jobs.counts", "Counts", "计数"),
    ("jobs.error", "Error", "错误"),
    ("jobs.replica", "Replica", "副本"),
    ("notices.kind", "Kind", "类型"),
    ("notices.message", "Message", "内容"),
    // Cost attribution: the bills drill-down by request tag and end user.
    ("bills.by_tag", "by tag", "按标签"),
    ("bills.by_end_user", "by end user", "按终端用户"),
    ("bills.tag_value", "Tag value", "标签值"),
    ("bills.end_user", "End user", "终端用户"),
    ("bills.untagged", "(none)", "（无）"),
    ("bills.by_asked", "by name asked for", "按请求的模型名"),
    ("bills.asked_served", "Asked → served", "请求的名称 → 实际模型"),
    ("bills.asked_catalog", "(the catalog name)", "（目录中的名称）"),
    // the browser walk's fixes (console2)
    ("apps.copy", "Copy", "复制"),
    ("apps.copied", "Copied", "已复制"),
    ("audit.export_csv", "Export CSV", "导出 CSV"),
    ("err.share", "must be between 0 and 1 (0 % and 100 %)", "必须在 0 到 1 之间（0% 到 100%）"),
    ("err.share_positive", "must be more than 0", "必须大于 0"),
    ("err.percent", "must be a percentage, like 5 or 12.5", "必须是百分比，例如 5 或 12.5"),
    ("err.other_model", "must name another existing model", "必须是另一个已存在的模型"),
    ("err.core_only", "only core tenants have guaranteed slots", "只有核心优先级的租户可以有保底并发"),
    ("err.slots_exceed", "the guaranteed slots exceed the pool capacity", "保底并发之和超过了并发池容量"),
    ("err.needs_capacity", "guaranteed slots need a pool capacity", "设置保底并发前须先设置并发池容量"),
    ("err.guarantees", "write tenant=slots, separated by commas (core-a=4, core-b=2)", "格式为 租户=并发数，用逗号分隔（core-a=4, core-b=2）"),
    ("err.tags", "tags are key=value separated by commas; a key starts with a lowercase letter (a-z, 0-9, '_', '-', '.'), a value has no spaces", "标签格式为 键=值，用逗号分隔；键以小写字母开头（a-z、0-9、'_'、'-'、'.'），值不含空格"),
    ("err.duplicate_tenant", "names a tenant twice", "同一租户出现了两次"),
    ("err.too_large", "too large", "数值过大"),
    ("err.deployment_name", "letters, digits, '.', '_' or '-', at most 64, starting with a letter or digit", "字母、数字、'.'、'_' 或 '-'，最多 64 个，以字母或数字开头"),
    ("err.weight_range", "must be between 0 and 10,000", "须在 0 到 10,000 之间"),
    ("err.priority_range", "must be between 0 and 100", "须在 0 到 100 之间"),
    ("err.max_100", "too long: at most 100 characters", "过长：最多 100 个字符"),
    ("err.max_200", "too long: at most 200 characters", "过长：最多 200 个字符"),
    ("err.max_254", "too long: at most 254 characters", "过长：最多 254 个字符"),
    ("err.max_2000", "too long: at most 2,000 characters", "过长：最多 2,000 个字符"),
    ("err.too_long", "too long", "过长"),
    ("limits.no_change", "no change: the limits restored were the ones in force", "无变化：恢复的限额与当时生效的限额相同"),
    ("err.at_least_one", "must be at least 1", "不能小于 1"),
    ("quota.requested_by", "Requested by", "申请人"),
    ("quota.decided_by", "Decided by", "审批人"),
    ("quota.refuse_not_admin", "Only a platform admin decides quota requests.", "只有平台管理员可以审批额度申请。"),
    ("quota.refuse_own", "You made this request: another platform admin decides it.", "这是您本人的申请，需由另一位平台管理员审批。"),
    ("quota.refuse_same_line", "You and the requester are in one line of account creation (one created the other, directly or through others): another platform admin decides it.", "您与申请人处于同一账号创建链（一方直接或间接创建了另一方），需由另一位平台管理员审批。"),
    ("quota.refuse_account_set", "Four eyes: you and the requester set one another's password, role, tenant or enabled state within the four-eyes window (auth.four_eyes_days, 30 days unless configured): another platform admin decides it.", "四眼原则：您与申请人在四眼期限内（auth.four_eyes_days，默认 30 天）设置过对方的密码、角色、租户或启用状态，需由另一位平台管理员审批。"),
    // time zone named, validation (console3)
    ("bills.state_closed", "This month is closed: its bill is final.", "本月已结账，账单为最终数据。"),
    ("bills.state_current", "This month is still running: the figures grow as requests are served.", "本月尚未结束：数据随请求实时增加。"),
    ("bills.state_previous", "This month has ended and is being closed: the figures may still change a little.", "本月已结束，正在结账：数据可能仍有少量变化。"),
    ("bills.span", "Period", "账期"),
    ("bills.times_in", "Days and times in", "日期与时间的时区："),
    ("bills.bad_period", "is not a month: write it as YYYY-MM, e.g. 2026-11. This month is shown.", "不是有效月份：请写成 YYYY-MM，例如 2026-11。下面显示本月。"),
    ("bills.exports_in", "Exports split days and months in", "导出按此时区划分日期与月份："),
    // units, codes shown in words (the catalogue test: console_every_page)
    ("unit.tok_month", "{n} tok/mo", "每月 {n} token"),
    ("unit.per_month", "{n}/mo", "每月 {n}"),
    ("unit.per_day_soft", "{n}/day soft", "每日软上限 {n}"),
    ("unit.rpm", "{n} rpm", "每分钟 {n} 次请求"),
    ("unit.input_tpm", "{n} in-tpm", "每分钟输入 {n} token"),
    ("unit.output_tpm", "{n} out-tpm", "每分钟输出 {n} token"),
    ("unit.in_flight", "{n} in flight", "最多 {n} 个并发"),
    ("dur.m", "{a}m", "{a} 分钟"),
    ("dur.hm", "{a}h {b}m", "{a} 小时 {b} 分钟"),
    ("dur.dh", "{a}d {b}h", "{a} 天 {b} 小时"),
    ("priority.core", "core", "核心"),
    ("priority.standard", "standard", "标准"),
    ("priority.batch", "batch", "批处理"),
    ("kind.chat", "chat", "对话"),
    ("kind.embedding", "embedding", "向量嵌入"),
    ("cap.both", "max_tokens and max_completion_tokens", "max_tokens 与 max_completion_tokens"),
    ("borrow_state.pending", "pending", "处理中"),
    ("borrow_state.active", "active", "生效中"),
    ("borrow_state.refused", "refused", "被拒绝"),
    ("borrow_trigger.hold_refused", "a request would have been refused", "请求本将被拒绝"),
    ("borrow_trigger.near_limit", "near the budget", "接近预算"),
    ("reclaim_state.pending", "pending", "处理中"),
    ("reclaim_state.done", "done", "已完成"),
    ("health.healthy", "healthy", "健康"),
    ("health.ejected", "ejected", "已摘除"),
    ("health.probing", "probing", "探测中"),
    ("health.parked", "parked", "已暂停"),
    ("outcome.ok", "ok", "成功"),
    ("outcome.idle", "nothing to do", "无事可做"),
    ("outcome.differences", "differences found", "发现差异"),
    ("outcome.failed", "failed", "失败"),
    ("outcome.skipped", "skipped", "已跳过"),
    ("outcome.running", "running", "运行中"),
    ("outcome.abandoned", "abandoned (its replica stopped)", "已中止（其副本已停止）"),
    ("job.stale-holds", "stale holds", "过期预扣清理"),
    ("job.rollover", "month rollover", "月度结转"),
    ("job.grant-expiry", "grant expiry", "临时额度到期"),
    ("job.alerts", "budget alerts", "预算告警"),
    ("job.forecast", "forecast", "花费预测"),
    ("job.reconcile", "reconcile", "对账"),
    ("job.borrow-check", "borrow check", "借用检查"),
    ("job.reclaim", "reclaim", "回收"),
    ("job.provider-reconcile", "provider reconcile", "供应商对账"),
    // What a job run counted (the jobs page's Counts column)
    ("count.accounts", "accounts", "账户"),
    ("count.alerts_recorded", "alerts recorded", "新记录的告警"),
    ("count.borrows_granted", "borrows granted", "批准的借用"),
    ("count.closed", "months closed", "已结账月份"),
    ("count.closed_orphaned", "orphaned holds closed", "已关闭的孤立预扣"),
    ("count.closed_stale", "stale holds closed", "已关闭的过期预扣"),
    ("count.days", "days", "天数"),
    ("count.deferred", "months deferred", "推迟的月份"),
    ("count.delivered", "alerts delivered", "已送达的告警"),
    ("count.delivery_failures", "delivery failures", "送达失败"),
    ("count.differences", "differences", "差异"),
    ("count.errors", "errors", "错误"),
    ("count.expired_grants_recorded", "expired grants recorded", "已记录的到期临时额度"),
    ("count.forecasts", "forecasts", "预测"),
    ("count.leases_expired", "leases expired", "已过期的租约"),
    ("count.lent_before", "tokens lent before", "此前借出的 token"),
    ("count.lines", "report lines", "报告行数"),
    ("count.need", "tokens needed back", "需收回的 token"),
    ("count.not_reconciled", "deployments not reconciled", "未对账的部署"),
    ("count.outbox_stored", "outbox events stored", "已保存的待发事件"),
    ("count.over_budget", "over budget", "超出预算"),
    ("count.period", "month", "月份"),
    ("count.periods", "months", "月份数"),
    ("count.purged", "months purged", "已清除的月份"),
    ("count.reclaimed_tokens", "tokens reclaimed", "已收回的 token"),
    ("count.reclaims", "reclaims", "回收次数"),
    ("count.revised_days", "revised days", "被修订的天数"),
    ("count.rollup_differences", "rollup differences", "汇总差异"),
    ("count.scopes", "budgeted scopes", "有预算的范围"),
    ("count.tenants", "tenants", "租户"),
    ("recon.help", "Each provider account's usage and cost reports compared with tollgate's books, per UTC day, model and class. Differences are classified; finance books what is left as an adjustment, approved by a second finance user.", "每个供应商账户的用量与费用报告按 UTC 日、模型和计费类别与 tollgate 账本比对。差异会被分类；财务将剩余差额记为调整，须由另一位财务人员批准。"),
    ("recon.show", "Show", "查看"),
    ("recon.accounts", "Provider accounts", "供应商账户"),
    ("recon.account", "Account", "账户"),
    ("recon.kind", "Provider", "供应商"),
    ("recon.api_base_url", "Admin API", "管理 API"),
    ("recon.deployments", "Deployments → provider id", "部署 → 供应商 ID"),
    ("recon.drift_alert", "Alert above", "告警阈值"),
    ("recon.no_accounts", "No provider account yet: a platform admin adds one through the admin API.", "尚无供应商账户：由平台管理员通过管理 API 添加。"),
    ("recon.account_form", "Add or change an account", "添加或修改账户"),
    ("recon.admin_key", "Admin key (write-only; leave empty to keep the stored one)", "管理密钥（只写；留空则保留已存的）"),
    ("recon.deployments_lines", "Deployments, one a line: model/deployment provider id", "部署，每行一个：模型/部署 供应商 ID"),
    ("recon.save_account", "Save account", "保存账户"),
    ("recon.not_reconciled", "Not reconciled (no account):", "未对账（无账户）："),
    ("recon.days", "Days", "每日对账"),
    ("recon.day_utc", "Day (UTC)", "日期（UTC）"),
    ("recon.provider", "Provider", "供应商"),
    ("recon.difference", "Difference", "差额"),
    ("recon.drift", "Drift", "偏差"),
    ("recon.final", "final", "已定稿"),
    ("recon.provisional", "provisional (fetched again until final)", "暂定（定稿前会重新获取）"),
    ("recon.revised", "revised", "已修订"),
    ("recon.model", "Model", "模型"),
    ("recon.class", "Class", "类别"),
    ("recon.tollgate_qty", "tollgate quantity", "tollgate 数量"),
    ("recon.provider_qty", "Provider quantity", "供应商数量"),
    ("recon.diff_qty", "Difference", "数量差"),
    ("recon.finding", "Finding", "结论"),
    ("recon.no_days", "No day reconciled in this month yet.", "本月尚无已对账的日期。"),
    ("recon.propose", "Propose adjustment", "提议调整"),
    ("recon.allocation", "Allocation", "分摊"),
    ("recon.pro_rata", "pro rata to departments' cost", "按部门费用比例"),
    ("recon.unallocated", "unallocated", "未分摊"),
    ("recon.adjustments", "Adjustments", "调整"),
    ("recon.amount", "Amount", "金额"),
    ("recon.shares", "Shares", "分摊明细"),
    ("allocation.pro_rata", "pro rata", "按比例"),
    ("allocation.unallocated", "unallocated", "未分摊"),
    ("adjstate.proposed", "proposed", "待批准"),
    ("adjstate.approved", "approved", "已批准"),
    ("adjstate.rejected", "rejected", "已拒绝"),
    ("class.requests", "requests", "请求数"),
    ("class.input", "input", "输入"),
    ("class.cached_input", "cached input", "缓存输入"),
    ("class.cache_write", "cache writes", "缓存写入"),
    ("class.cache_write_5m", "cache writes (5 min)", "缓存写入（5 分钟）"),
    ("class.cache_write_1h", "cache writes (1 hour)", "缓存写入（1 小时）"),
    ("class.output", "output", "输出"),
    ("class.audio_input", "audio input", "音频输入"),
    ("class.audio_output", "audio output", "音频输出"),
    ("class.web_search", "web searches", "网页搜索"),
    ("class.other", "other", "其他"),
    ("finding.match", "match", "一致"),
    ("finding.rounding", "rounding", "舍入"),
    ("finding.day_edge", "at the day's edge", "跨日边界"),
    ("finding.price", "price differs from the invoiced rate", "价格与发票费率不同"),
    ("finding.outside_traffic", "traffic outside tollgate", "tollgate 之外的流量"),
    ("finding.not_billed", "not billed by the provider", "供应商未计费"),
    ("finding.provider_more", "provider counted more", "供应商计量更多"),
    ("notice.provider_drift", "provider drift", "供应商对账偏差"),
    ("notice.provider_reconcile_failed", "provider reconcile failed", "供应商对账失败"),
    ("notice.provider_day_revised", "provider revised a day", "供应商修订了某日数据"),
    ("notice.provider_drift_text", "Provider account {account}: {day} drifts {drift} % from the provider's cost. See Reconciliation.", "供应商账户 {account}：{day} 与供应商费用偏差 {drift}%。见“供应商对账”页面。"),
    ("notice.provider_reconcile_failed_text", "Provider account {account}: {day} could not be reconciled; the job tries again. The error is on the Jobs page.", "供应商账户 {account}：{day} 无法对账，任务会重试。错误详情见“后台任务”页面。"),
    ("notice.provider_day_revised_text", "Provider account {account}: the provider revised {day}; its comparison was replaced.", "供应商账户 {account}：供应商修订了 {day} 的数据，对账结果已更新。"),
    ("month.archiving", "archiving", "归档中"),
    ("month.closed", "closed", "已结账"),
    ("notice.usage_anomaly", "usage anomaly", "用量异常"),
    ("notice.budget_used_70", "70 % of a budget used", "预算已用 70%"),
    ("notice.budget_used_90", "90 % of a budget used", "预算已用 90%"),
    ("notice.budget_forecast_over_budget", "forecast over budget", "预计超出预算"),
    ("notice.budget_used_text", "{scope} has used {p} % or more of its monthly {measure} budget in {period}: {used} of {limit}.", "{scope} 在 {period} 已用掉每月{measure}预算的 {p}% 以上：{used}，预算 {limit}。"),
    ("notice.budget_forecast_text", "{scope} is forecast to spend {forecast} by the end of {period}, over its monthly {measure} budget of {limit}.", "预计 {scope} 到 {period} 月底将用掉 {forecast}，超出每月{measure}预算 {limit}。"),
    ("notice.measure_cost", "cost", "费用"),
    ("notice.measure_tokens", "token", "token"),
    ("notice.scope_app", "app {app} of {tenant}", "{tenant} 的应用 {app}"),
    ("notice.job_failed", "job failed", "任务失败"),
    ("notice.redis_eviction_policy", "Redis eviction policy", "Redis 驱逐策略"),
    ("notice.usage_anomaly_text", "Model {model}: the provider reported usage the gateway does not believe ({kind}); the request was billed at {in} input + {out} output tokens, and its raw report is kept in the ledger. Request:", "模型 {model}：供应商报告的用量不可信（{kind}）；该请求按输入 {in} + 输出 {out} token 计费，原始报告保存在账本中。请求："),
    ("anomaly.input_above_bound", "input above the estimate's bound", "输入超出估计上限"),
    ("anomaly.output_above_cap", "output above the cap sent", "输出超出所设上限"),
    ("anomaly.negative", "a negative count", "负数计数"),
    ("anomaly.malformed", "a count that is not a number", "计数不是数字"),
    ("notice.job_failed_text", "The job {job} failed; the schedule retries it. The error is on the Jobs page.", "任务“{job}”失败，调度会重试。错误详情见“后台任务”页面。"),
    ("notice.redis_eviction_policy_text", "Redis's maxmemory-policy is not noeviction: Redis may evict quota counters. Set maxmemory-policy to noeviction.", "Redis 的 maxmemory-policy 不是 noeviction：Redis 可能驱逐额度计数。请将 maxmemory-policy 设为 noeviction。"),
    // the request log and the lookup's sentence
    ("req.log", "Request log", "请求日志"),
    ("req.lookup", "Look up one request", "查询单个请求"),
    ("req.filter", "Filter", "筛选"),
    ("req.from_zoned", "From ({zone})", "起（{zone}）"),
    ("req.to_zoned", "To ({zone})", "止（{zone}）"),
    ("req.outcome", "Outcome", "结果"),
    ("req.why", "Status or reason", "状态或原因"),
    ("req.request", "Request", "请求"),
    ("req.latency", "Latency", "耗时"),
    ("req.unknown_key", "a deleted key", "已删除的密钥"),
    ("req.none", "No requests match these filters.", "没有符合筛选条件的请求。"),
    ("req.newest", "← Newest", "← 最新"),
    ("req.older", "Older →", "更早 →"),
    ("req.counters_note", "What the gateway read when it decided.", "网关做出决定时读取的数值。"),
    ("req.unauthenticated_note", "A call with a revoked or expired key is recorded under that key (at most five a second per key; the rest are counted in the gateway's metrics). A call whose key nobody issued is refused with 401 before any tenant is known and is not recorded here.", "使用已吊销或已过期密钥的调用记录在该密钥名下（每个密钥每秒最多记录五条，其余只计入网关指标）。密钥从未签发过的调用在确定租户之前即以 401 拒绝，不在此记录。"),
    ("err.bad_filter", "A filter could not be read (a tag is key=value, e.g. project=apollo); nothing is shown until it is fixed.", "无法读取某个筛选条件（标签格式为 键=值，例如 project=apollo）；修正后才会显示结果。"),
    ("say.who_tenant", "tenant {name}", "租户 {name}"),
    ("say.who_app", "app {name}", "应用 {name}"),
    ("say.who_key", "key {name}", "密钥 {name}"),
    ("say.who_end_user", "an end user of app {name}", "应用 {name} 的某个终端用户"),
    ("say.refused_tokens", "Refused at {at}: {who} had {left} tokens left of its monthly token budget of {limit} tokens; this request needed up to {need}.", "{at} 被拒绝：{who} 的每月 token 预算为 {limit}，仅剩 {left}，而此请求最多需要 {need}。"),
    ("say.refused_cost", "Refused at {at}: {who} had {left} left of its monthly cost budget of {limit}.", "{at} 被拒绝：{who} 的每月费用预算为 {limit}，仅剩 {left}。"),
    ("say.refused_rate", "Refused at {at}: {who} reached its limit of {limit} {unit}.", "{at} 被拒绝：{who} 已达到上限（{unit} {limit}）。"),
    ("say.refused", "Refused at {at} (HTTP {status}): {why}.", "{at} 被拒绝（HTTP {status}）：{why}。"),
    ("say.queued_for", "{ms} ms, for: {why}", "{ms} 毫秒，原因：{why}"),
    ("say.degraded", "Admitted with a change at {at}: {why}.", "{at} 已准入，但有调整：{why}。"),
    ("say.admitted", "Admitted at {at}: {model}, {in} tokens in and {out} out, cost {cost}, answered in {latency}.", "{at} 已准入：模型 {model}，输入 {in} token，输出 {out} token，费用 {cost}，耗时 {latency}。"),
    ("say.settled_as", "Settled as: {status}.", "结算状态：{status}。"),
    ("say.retry", "Retry after {secs} s.", "可在 {secs} 秒后重试。"),
    ("say.ms", "{n} ms", "{n} 毫秒"),
    ("say.secs", "{n} s", "{n} 秒"),
    ("say.unit_rpm", "requests per minute", "每分钟请求数"),
    ("say.unit_input_tpm", "input tokens per minute", "每分钟输入 token"),
    ("say.unit_output_tpm", "output tokens per minute", "每分钟输出 token"),
    ("say.unit_inflight", "requests in flight", "并发请求数"),
    ("say.unit_end_users", "new end users per minute", "每分钟新终端用户数"),
    ("counter.headroom_tokens", "Tokens left", "剩余 token"),
    ("counter.headroom_cost", "Budget left", "剩余预算"),
    ("counter.limit_value", "The limit", "限额"),
    ("counter.retry_after_ms", "Retry after (ms)", "重试等待（毫秒）"),
    ("counter.retry_after_secs", "Retry after (s)", "重试等待（秒）"),
    ("counter.est_input_tokens", "Estimated input tokens", "估计输入 token"),
    ("counter.est_output_tokens", "Output tokens held", "预扣输出 token"),
    ("counter.requested_output_tokens", "Output tokens asked for", "请求的输出 token"),
    ("counter.clamped_output_tokens", "Output tokens allowed", "允许的输出 token"),
    ("counter.delivered_output_tokens", "Output tokens delivered", "已交付输出 token"),
    ("counter.cut_off", "Stream cut off", "流被截断"),
    ("counter.waited_ms", "Waited in the queue (ms)", "在队列中等待（毫秒）"),
    ("counter.queue_reason", "Waited for", "等待原因"),
    ("counter.upstream_status", "Provider's status", "供应商状态码"),
    ("counter.upstream_error", "Provider's message", "供应商的消息"),
    ("status.ok", "answered", "已应答"),
    ("status.refused", "refused", "已拒绝"),
    ("status.upstream_error", "provider error", "供应商错误"),
    ("status.client_closed", "client hung up", "客户端已断开"),
    ("status.cut_off", "cut off", "已截断"),
    ("status.expired", "hold expired", "预扣已过期"),
    ("status.other", "other", "其他"),
    ("reason.tenant_monthly_budget_exhausted", "the tenant's monthly token budget is used up", "租户的每月 token 预算已用完"),
    ("reason.app_monthly_budget_exhausted", "the app's monthly token budget is used up", "应用的每月 token 预算已用完"),
    ("reason.key_monthly_budget_exhausted", "the key's monthly token budget is used up", "密钥的每月 token 预算已用完"),
    ("reason.tenant_monthly_cost_exhausted", "the tenant's monthly cost budget is used up", "租户的每月费用预算已用完"),
    ("reason.app_monthly_cost_exhausted", "the app's monthly cost budget is used up", "应用的每月费用预算已用完"),
    ("reason.key_monthly_cost_exhausted", "the key's monthly cost budget is used up", "密钥的每月费用预算已用完"),
    ("reason.tenant_inflight_exceeded", "too many of the tenant's requests in flight", "租户的并发请求过多"),
    ("reason.app_inflight_exceeded", "too many of the app's requests in flight", "应用的并发请求过多"),
    ("reason.key_inflight_exceeded", "too many of the key's requests in flight", "密钥的并发请求过多"),
    ("reason.tenant_rpm_exceeded", "the tenant's requests-per-minute limit", "租户的每分钟请求数上限"),
    ("reason.app_rpm_exceeded", "the app's requests-per-minute limit", "应用的每分钟请求数上限"),
    ("reason.key_rpm_exceeded", "the key's requests-per-minute limit", "密钥的每分钟请求数上限"),
    ("reason.tenant_input_tpm_exceeded", "the tenant's input tokens per minute", "租户的每分钟输入 token 上限"),
    ("reason.app_input_tpm_exceeded", "the app's input tokens per minute", "应用的每分钟输入 token 上限"),
    ("reason.key_input_tpm_exceeded", "the key's input tokens per minute", "密钥的每分钟输入 token 上限"),
    ("reason.tenant_output_tpm_exceeded", "the tenant's output tokens per minute", "租户的每分钟输出 token 上限"),
    ("reason.app_output_tpm_exceeded", "the app's output tokens per minute", "应用的每分钟输出 token 上限"),
    ("reason.key_output_tpm_exceeded", "the key's output tokens per minute", "密钥的每分钟输出 token 上限"),
    ("reason.end_user_monthly_budget_exhausted", "the end user's monthly token budget is used up", "终端用户的每月 token 预算已用完"),
    ("reason.end_user_monthly_cost_exhausted", "the end user's monthly cost budget is used up", "终端用户的每月费用预算已用完"),
    ("reason.end_user_rpm_exceeded", "the end user's requests-per-minute limit", "终端用户的每分钟请求数上限"),
    ("reason.end_user_inflight_exceeded", "too many of the end user's requests in flight", "终端用户的并发请求过多"),
    ("reason.end_user_input_tpm_exceeded", "the end user's input tokens per minute", "终端用户的每分钟输入 token 上限"),
    ("reason.end_user_output_tpm_exceeded", "the end user's output tokens per minute", "终端用户的每分钟输出 token 上限"),
    ("reason.app_end_users_per_minute_exceeded", "too many new end users of the app this minute", "本分钟内应用的新终端用户过多"),
    ("reason.invalid_api_key", "the API key is not valid", "API 密钥无效"),
    ("keystate.revoked", "the API key was revoked; issue a new one on the apps page", "API 密钥已被吊销；请在应用页签发新密钥"),
    ("keystate.rotated", "the API key was rotated and the grace period of this secret has ended; use the key's new secret", "API 密钥已轮换，此旧密钥的宽限期已结束；请使用新密钥"),
    ("keystate.expired", "the API key has expired; issue a new one on the apps page", "API 密钥已过期；请在应用页签发新密钥"),
    ("reason.invalid_request", "the request was not valid", "请求无效"),
    ("reason.model_not_found", "no such model", "没有此模型"),
    ("reason.model_not_allowed", "the model is not allowed for this key", "此密钥不允许使用该模型"),
    ("reason.service_tier_not_allowed", "the service tier is not allowed for this key", "此密钥不允许使用该服务等级"),
    ("reason.tool_not_allowed", "the hosted tool is not allowed for this key", "此密钥不允许使用该托管工具"),
    ("reason.context_length_exceeded", "the prompt is longer than the model's context", "提示超出模型的上下文长度"),
    ("reason.quota_store_unavailable", "the quota store was unreachable (the gateway fails closed)", "额度存储不可用（网关按拒绝处理）"),
    ("reason.upstream_error", "the provider answered with an error", "供应商返回错误"),
    ("reason.upstream_rate_limited", "the provider was rate limiting", "供应商限流"),
    ("reason.upstream_unavailable", "no deployment of the model was available", "该模型没有可用的部署"),
    ("reason.upstream_response_too_large", "the provider's answer was too large", "供应商的响应过大"),
    ("reason.max_tokens_clamped_to_budget", "max_tokens was lowered to what the budget had left", "max_tokens 被压缩到预算剩余量"),
    ("reason.daily_cost_soft_limit", "the daily soft cost limit was passed", "已超过每日软性费用上限"),
    ("reason.queue_timeout", "it waited in the queue too long", "排队等待超时"),
    ("reason.model_pool_full", "the model's capacity was full", "模型容量已满"),
    ("reason.tenant_queue_full", "the tenant's queue was full", "租户的队列已满"),
    ("reason.tenant_stream_cap", "the tenant had its maximum of open streams", "租户打开的流式响应已达上限"),
    ("reason.invalid_tag", "a request tag was not valid", "请求标签无效"),
    ("reason.missing_required_tag", "a required request tag was missing", "缺少必需的请求标签"),
    ("reason.invalid_end_user", "the end user id was not valid", "终端用户 ID 无效"),
    ("reason.upstream_rejected_request", "the provider refused the request as it was", "供应商拒绝了该请求"),
    ("reason.key_count_tokens_exceeded", "the key counted too many tokens this minute", "该密钥本分钟计数的令牌过多"),
    ("reason.other", "another reason", "其他原因"),
];

#[cfg(test)]
mod budget_reason_tests {
    use super::*;

    #[test]
    fn budget_reason_codes_read_in_both_languages() {
        assert_eq!(
            Lang::En.tv("reason", "tenant_model_monthly_cost_exhausted"),
            "the tenant's monthly cost budget on a model is used up"
        );
        assert_eq!(
            Lang::Zh.tv("reason", "key_daily_requests_exhausted"),
            "密钥的每日请求数预算已用完"
        );
        // The month's own budgets keep their listed words.
        assert_eq!(
            Lang::En.tv("reason", "key_monthly_cost_exhausted"),
            "the key's monthly cost budget is used up"
        );
        assert_eq!(
            Lang::En.tv("reason", "nonsense_exhausted"),
            "nonsense_exhausted"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_both_languages_once() {
        let mut seen = std::collections::HashSet::new();
        for (k, en, zh) in TABLE {
            assert!(seen.insert(*k), "duplicate key {k}");
            assert!(!en.is_empty() && !zh.is_empty(), "{k} is missing a text");
        }
    }

    /// Every translation key the templates and the console's code use is
    /// in the table: no page shows an untranslated string. A key is a
    /// quoted `area.word` whose area is one of the table's areas.
    #[test]
    fn every_used_key_is_translated() {
        let areas: std::collections::HashSet<&str> = TABLE
            .iter()
            .map(|(k, _, _)| k.split('.').next().unwrap())
            .collect();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        collect(&root.join("../../templates"), &mut files);
        collect(&root.join("src/web"), &mut files);
        collect(&root.join("src/api"), &mut files);
        let mut missing = Vec::new();
        let mut used = 0;
        let is_key = |lit: &str| {
            lit.split_once('.').is_some_and(|(area, rest)| {
                areas.contains(area)
                    && !rest.is_empty()
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.')
            })
        };
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let keys: Vec<&str> = if f.extension().is_some_and(|x| x == "html") {
                // Templates: every `t("key")`.
                text.split("t(\"")
                    .skip(1)
                    .filter_map(|p| p.split('"').next())
                    .collect()
            } else {
                // Rust: string literals that look like keys.
                text.split('"')
                    .enumerate()
                    .filter(|(i, lit)| i % 2 == 1 && is_key(lit))
                    .map(|(_, lit)| lit)
                    .collect()
            };
            for key in keys {
                used += 1;
                if lookup(key).is_none() {
                    missing.push(format!("{}: {key}", f.display()));
                }
            }
        }
        assert!(
            used > 50,
            "the scan found only {used} keys: is it looking in the right place?"
        );
        assert!(missing.is_empty(), "untranslated keys: {missing:#?}");
    }

    fn collect(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                collect(&p, out);
            } else if p.extension().is_some_and(|x| x == "html" || x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn accept_language_and_cookie() {
        let mut h = HeaderMap::new();
        assert_eq!(Lang::from_headers(&h), Lang::En);
        h.insert(
            "accept-language",
            "fr-FR,zh-CN;q=0.8,en;q=0.5".parse().unwrap(),
        );
        assert_eq!(Lang::from_headers(&h), Lang::Zh);
        h.insert("cookie", "a=b; tg_lang=en".parse().unwrap());
        assert_eq!(Lang::from_headers(&h), Lang::En);
        assert_eq!(Lang::Zh.t("nav.tenants"), "租户");
    }
}
