//! The pages: one askama template struct per page, with view models of preformatted
//! strings and numbers. Templates live in `webui/templates/` and extend `base.html`.

use askama::Template;

/// Filters the page templates use beyond askama's own.
mod filters {
    /// Percent-encodes a value for one URL path segment (an NQN may hold `/`, `?`, `#` or
    /// `%`, which would otherwise change the URL a form posts to); the server's path
    /// extractor decodes it back.
    pub fn path_segment<T: std::fmt::Display>(
        value: T,
        _: &dyn askama::Values,
    ) -> askama::Result<String> {
        Ok(crate::format::path_segment(&value.to_string()))
    }
}

/// A problem detail shown in a page's error banner (the API's RFC 9457 fields).
#[derive(Debug, Clone, Default)]
pub struct ProblemView {
    /// HTTP status.
    pub status: u16,
    /// Short title (`Unprocessable Entity`).
    pub title: String,
    /// What went wrong, for a person.
    pub detail: String,
}

/// What every signed-in page shares: who is logged in, what they may do, the nav entry
/// to highlight, the CSRF token for forms and an optional error banner.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Page title.
    pub title: String,
    /// Nav key of this page (`dashboard`, `shares`, ...).
    pub active: &'static str,
    /// User name.
    pub user: String,
    /// Role name.
    pub role: String,
    /// Operator or admin: may change shares, sessions, events.
    pub can_write: bool,
    /// Admin: may manage users.
    pub is_admin: bool,
    /// CSRF token, sent back in each form's hidden `csrf` field.
    pub csrf: String,
    /// An error to show above the content.
    pub error: Option<ProblemView>,
}

/// The login page.
#[derive(Template, Default)]
#[template(path = "login.html")]
pub struct LoginPage {
    /// The user name typed last time.
    pub username: String,
    /// Why the last attempt failed.
    pub error: Option<ProblemView>,
}

/// A rate figure on the dashboard.
#[derive(Debug, Clone, Default)]
pub struct Rate {
    /// Bytes per second.
    pub bps: u64,
    /// The same, for people (`12 MiB/s`).
    pub text: String,
}

/// Pool capacity and state.
#[derive(Debug, Clone, Default)]
pub struct PoolView {
    /// `directory` or `btrfs`.
    pub kind: String,
    /// Redundancy profile.
    pub profile: String,
    /// `healthy`, `degraded`, `failed`, `creating`.
    pub state: String,
    /// Why it is not healthy.
    pub reason: String,
    /// Total, for people.
    pub size: String,
    /// Used, for people.
    pub used: String,
    /// Available, for people.
    pub available: String,
    /// Used bytes (meter value).
    pub used_bytes: u64,
    /// Total bytes (meter maximum, at least 1).
    pub size_bytes: u64,
    /// Where the meter turns to a warning (90 % of `size_bytes`).
    pub high_bytes: u64,
    /// Percent used, rounded.
    pub percent: u64,
    /// Where the pool lives.
    pub path: String,
}

/// The dashboard.
#[derive(Template, Default)]
#[template(path = "dashboard.html")]
pub struct DashboardPage {
    /// Layout.
    pub layout: Layout,
    /// SMB reads (clients reading), last second.
    pub smb_read: Rate,
    /// SMB writes, last second.
    pub smb_write: Rate,
    /// NVMe reads, last second.
    pub nvme_read: Rate,
    /// NVMe writes, last second.
    pub nvme_write: Rate,
    /// All of them.
    pub total: Rate,
    /// Polyline points of written bytes per second (see [`crate::chart_points`]).
    pub chart_write: String,
    /// Polyline points of read bytes per second.
    pub chart_read: String,
    /// Chart scale (top of the chart), for people.
    pub chart_max: String,
    /// Highest total rate in the series (bytes per second).
    pub chart_peak: u64,
    /// Polyline points of SMB + NVMe operations per second.
    pub chart_ops: String,
    /// Operations chart scale, for people.
    pub chart_ops_max: String,
    /// Polyline points of the SMB p99 latency (worst of READ and WRITE) per second.
    pub chart_smb_p99: String,
    /// Polyline points of the NVMe p99 latency (worst of Read and Write) per second.
    pub chart_nvme_p99: String,
    /// Latency chart scale, for people.
    pub chart_latency_max: String,
    /// Latency percentiles since start, per protocol and request family.
    pub latency: Vec<LatencyRow>,
    /// Traffic per share since start.
    pub share_traffic: Vec<TrafficRow>,
    /// Traffic per NVMe volume since start.
    pub volume_traffic: Vec<TrafficRow>,
    /// Whether telemetry collection is on.
    pub telemetry_on: bool,
    /// The pool.
    pub pool: PoolView,
    /// Live SMB sessions.
    pub smb_sessions: u64,
    /// Live NVMe/TCP controllers.
    pub nvme_sessions: u64,
    /// Number of shares.
    pub shares: usize,
    /// Events not yet acknowledged.
    pub open_events: usize,
}

/// Latency percentiles of one request family (dashboard table).
#[derive(Debug, Clone, Default)]
pub struct LatencyRow {
    /// `SMB` or `NVMe`.
    pub protocol: String,
    /// Request family (`read`, `write`, `create`, `query_directory`).
    pub op: String,
    /// Requests measured.
    pub count: u64,
    /// Median, for people (`85 µs`).
    pub p50: String,
    /// 99th percentile, for people.
    pub p99: String,
    /// 99.9th percentile, for people.
    pub p999: String,
}

/// Traffic of one share or volume since start (dashboard table).
#[derive(Debug, Clone, Default)]
pub struct TrafficRow {
    /// Share or volume name.
    pub name: String,
    /// Bytes read by clients, for people.
    pub read: String,
    /// Bytes written by clients, for people.
    pub written: String,
    /// Operations.
    pub operations: u64,
    /// Operations answered with an error.
    pub errors: u64,
}

/// A latency in microseconds for people (`850 µs`, `12.5 ms`, `1.20 s`); `–` for none.
pub fn human_micros(us: u64) -> String {
    match us {
        0 => "–".to_string(),
        1..=999 => format!("{us} µs"),
        1_000..=999_999 => format!("{:.1} ms", us as f64 / 1e3),
        _ => format!("{:.2} s", us as f64 / 1e6),
    }
}

/// One share in the list.
#[derive(Debug, Clone, Default)]
pub struct ShareRow {
    /// Name.
    pub name: String,
    /// Comment.
    pub comment: String,
    /// Quota for people, or `none`.
    pub quota: String,
    /// Quota as typed back into the edit field (`""` for none).
    pub quota_field: String,
    /// Used bytes.
    pub used_bytes: u64,
    /// Used, for people.
    pub used: String,
    /// Meter maximum: the quota, else the pool size.
    pub bar_max: u64,
    /// Where the meter turns to a warning (90 % of `bar_max`).
    pub bar_high: u64,
    /// Read-only share.
    pub read_only: bool,
    /// Encryption required.
    pub encrypt: bool,
    /// Guests may connect.
    pub guest_ok: bool,
    /// Persistent handles (continuously available).
    pub continuously_available: bool,
    /// Allowed users, comma-separated (`""`: every user).
    pub users: String,
    /// UNC path.
    pub unc: String,
}

/// Shares.
#[derive(Template, Default)]
#[template(path = "shares.html")]
pub struct SharesPage {
    /// Layout.
    pub layout: Layout,
    /// The shares.
    pub shares: Vec<ShareRow>,
}

/// One user.
#[derive(Debug, Clone, Default)]
pub struct UserRow {
    /// Name.
    pub name: String,
    /// Role, or `SMB only`.
    pub role: String,
    /// Role as the form field holds it (`viewer`, …; empty for SMB only).
    pub role_value: String,
    /// RFC 3339.
    pub created_at: String,
    /// The signed-in user (cannot delete themself here).
    pub is_self: bool,
}

/// Users.
#[derive(Template, Default)]
#[template(path = "users.html")]
pub struct UsersPage {
    /// Layout.
    pub layout: Layout,
    /// The users the caller may see.
    pub users: Vec<UserRow>,
}

/// One live SMB session or NVMe controller.
#[derive(Debug, Clone, Default)]
pub struct SessionRow {
    /// Registry id (what disconnect takes).
    pub id: u64,
    /// `smb` or `nvme_tcp`.
    pub protocol: String,
    /// User or host NQN.
    pub user: String,
    /// Client address.
    pub client: String,
    /// RFC 3339.
    pub since: String,
    /// Share(s) or subsystem.
    pub target: String,
    /// Bytes read, for people.
    pub read: String,
    /// Bytes written, for people.
    pub written: String,
}

/// Sessions.
#[derive(Template, Default)]
#[template(path = "sessions.html")]
pub struct SessionsPage {
    /// Layout.
    pub layout: Layout,
    /// Live sessions.
    pub sessions: Vec<SessionRow>,
}

/// One event.
#[derive(Debug, Clone, Default)]
pub struct EventRow {
    /// Id (what acknowledge takes).
    pub id: i64,
    /// RFC 3339.
    pub at: String,
    /// `info`, `warning`, `critical`.
    pub severity: String,
    /// Dotted kind.
    pub kind: String,
    /// What it is about.
    pub subject: String,
    /// Sentence.
    pub message: String,
    /// Acknowledged.
    pub acked: bool,
    /// By whom and when, for people.
    pub acked_text: String,
    /// When the condition cleared (`""` while it lasts or for one-off events).
    pub resolved_at: String,
}

/// Events.
#[derive(Template, Default)]
#[template(path = "events.html")]
pub struct EventsPage {
    /// Layout.
    pub layout: Layout,
    /// Newest first.
    pub events: Vec<EventRow>,
}

/// One device of the pool or the machine.
#[derive(Debug, Clone, Default)]
pub struct DeviceRow {
    /// Device node.
    pub path: String,
    /// `nvme`, `loop`, `other`.
    pub kind: String,
    /// Model.
    pub model: String,
    /// Serial.
    pub serial: String,
    /// Size, for people.
    pub size: String,
    /// In the pool.
    pub in_pool: bool,
    /// Why it cannot join, if it cannot.
    pub busy: String,
    /// Health summary (temperature, wear) or `""`.
    pub health: String,
}

/// Pool and devices.
#[derive(Template, Default)]
#[template(path = "pool.html")]
pub struct PoolPage {
    /// Layout.
    pub layout: Layout,
    /// The pool.
    pub pool: PoolView,
    /// Pool members: path and state.
    pub members: Vec<(String, String)>,
    /// Block devices of the machine.
    pub devices: Vec<DeviceRow>,
}

/// One volume.
#[derive(Debug, Clone, Default)]
pub struct VolumeRow {
    /// Name.
    pub name: String,
    /// Size, for people.
    pub size: String,
    /// UUID.
    pub uuid: String,
    /// RFC 3339.
    pub created_at: String,
}

/// One NVMe subsystem.
#[derive(Debug, Clone, Default)]
pub struct SubsystemRow {
    /// NQN.
    pub nqn: String,
    /// `any host` or the allowed host NQNs.
    pub hosts: String,
    /// `nsid → volume` pairs, for people.
    pub namespaces: String,
    /// Allowed host NQNs, comma-separated (the edit form's field).
    pub host_list: String,
    /// Every host may connect.
    pub allow_any_host: bool,
    /// (nsid, volume) of each namespace (remove buttons).
    pub namespace_list: Vec<(u32, String)>,
}

/// Volumes and NVMe subsystems.
#[derive(Template, Default)]
#[template(path = "volumes.html")]
pub struct VolumesPage {
    /// Layout.
    pub layout: Layout,
    /// Volumes.
    pub volumes: Vec<VolumeRow>,
    /// Subsystems.
    pub subsystems: Vec<SubsystemRow>,
}

/// One snapshot.
#[derive(Debug, Clone, Default)]
pub struct SnapshotRow {
    /// Id.
    pub id: i64,
    /// `share NAME` or `volume NAME`.
    pub of: String,
    /// Snapshot name.
    pub name: String,
    /// RFC 3339.
    pub created_at: String,
}

/// Snapshots.
#[derive(Template, Default)]
#[template(path = "snapshots.html")]
pub struct SnapshotsPage {
    /// Layout.
    pub layout: Layout,
    /// Snapshots, oldest first.
    pub snapshots: Vec<SnapshotRow>,
    /// Why there are none to list (directory pool), or `""`.
    pub note: String,
}

/// One API token or login session.
#[derive(Debug, Clone, Default)]
pub struct TokenRow {
    /// Id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Owner.
    pub user: String,
    /// `api` or `session`.
    pub kind: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339 or `never`.
    pub expires_at: String,
    /// RFC 3339 or `never`.
    pub last_used_at: String,
}

/// API tokens.
#[derive(Template, Default)]
#[template(path = "tokens.html")]
pub struct TokensPage {
    /// Layout.
    pub layout: Layout,
    /// Tokens the caller may see.
    pub tokens: Vec<TokenRow>,
    /// The secret of a token just created, shown this once (empty otherwise).
    pub new_token: String,
}

/// An error page (a failed page load, or a refused form without a page to return to).
#[derive(Template, Default)]
#[template(path = "error.html")]
pub struct ErrorPage {
    /// Layout (its `error` is the problem shown).
    pub layout: Layout,
}
