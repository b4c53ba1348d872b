//! Alerts. Failed SMB logins become `auth.failed` events ([`smb_login_failed`]).
//! Conditions watched in the background: a `share.quota` condition (warning) is
//! raised when a share's usage reaches 90% of its quota and resolved when it drops below.
//! The watcher reads the pool's lock-free quota trackers every [`INTERVAL`] and touches
//! the database only when a share's state changes (and once per share at start).

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::db::events::Severity;
use crate::state::AppState;

/// How often share usage is compared with the quotas.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Kind of the quota condition event.
pub const SHARE_QUOTA: &str = "share.quota";

/// Whether `used` is at or above 90% of `limit`.
fn over_threshold(used: u64, limit: u64) -> bool {
    u128::from(used) * 10 >= u128::from(limit) * 9
}

/// Watches share quotas until `shutdown`.
pub async fn watch_quotas(state: AppState, shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut known: HashMap<String, bool> = HashMap::new();
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        for (share, used) in state.pool.share_usage() {
            let Some(limit) = state.pool.share_quota(&share).limit() else {
                continue;
            };
            let over = limit > 0 && over_threshold(used, limit);
            if known.get(&share) == Some(&over) {
                continue;
            }
            let subject = share.clone();
            let result = if over {
                let message =
                    format!("share {share} uses {used} of its {limit}-byte quota (90% or more)");
                state
                    .db
                    .call(move |db| {
                        db.raise_condition(Severity::Warning, SHARE_QUOTA, &subject, &message)
                            .map(|_| ())
                    })
                    .await
            } else {
                state
                    .db
                    .call(move |db| db.resolve_condition(SHARE_QUOTA, &subject).map(|_| ()))
                    .await
            };
            match result {
                Ok(()) => {
                    known.insert(share, over);
                }
                Err(e) => tracing::error!(error = %e, share = %share, "recording a quota alert"),
            }
        }
    }
}

/// Records a failed SMB login as an `auth.failed` warning event, on a background task
/// (never blocks the caller; without a runtime it is only logged).
pub fn smb_login_failed(state: &AppState, user: Option<&str>, peer: std::net::SocketAddr) {
    let user = user.unwrap_or("").to_string();
    tracing::warn!(user = %user, remote = %peer, "failed SMB login");
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let db = state.db.clone();
    rt.spawn(async move {
        let message = format!("failed SMB login as {user:?} from {}", peer.ip());
        let raised = db
            .call(move |db| db.raise_event(Severity::Warning, "auth.failed", &user, &message))
            .await;
        if let Err(e) = raised {
            tracing::error!(error = %e, "recording a failed SMB login event");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::over_threshold;

    #[test]
    fn threshold_is_ninety_percent() {
        assert!(!over_threshold(899, 1000));
        assert!(over_threshold(900, 1000));
        assert!(over_threshold(u64::MAX, u64::MAX));
        assert!(!over_threshold(0, 1));
    }
}
