//! Failed-login throttling per client address and per user name, in memory and bounded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures allowed per key within [`WINDOW`] before logins are refused.
pub const MAX_FAILURES: u32 = 10;
/// Sliding window for counting failures.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Most keys tracked; beyond it the oldest windows are dropped (bounds memory under a
/// distributed attack, at the price of forgetting some counts).
pub const MAX_KEYS: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

/// Counts failed logins.
#[derive(Debug, Default)]
pub struct LoginLimiter {
    windows: Mutex<HashMap<String, Window>>,
}

impl LoginLimiter {
    /// Seconds to wait if any of `keys` is over the limit, else `None`.
    pub fn retry_after(&self, keys: &[String], now: Instant) -> Option<u64> {
        let map = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        keys.iter()
            .filter_map(|k| map.get(k))
            .filter(|w| w.failures >= MAX_FAILURES && now.duration_since(w.started) < WINDOW)
            .map(|w| {
                WINDOW
                    .saturating_sub(now.duration_since(w.started))
                    .as_secs()
                    .max(1)
            })
            .max()
    }

    /// Records one failure against every key.
    pub fn record_failure(&self, keys: &[String], now: Instant) {
        let mut map = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_KEYS {
            map.retain(|_, w| now.duration_since(w.started) < WINDOW);
            if map.len() >= MAX_KEYS {
                map.clear();
            }
        }
        for k in keys {
            let w = map.entry(k.clone()).or_insert(Window {
                started: now,
                failures: 0,
            });
            if now.duration_since(w.started) >= WINDOW {
                *w = Window {
                    started: now,
                    failures: 0,
                };
            }
            w.failures = w.failures.saturating_add(1);
        }
    }

    /// Clears the user-name key after a successful login (the address key stays, so a
    /// guesser cannot reset its own counter by knowing one password).
    pub fn record_success(&self, user_key: &str) {
        let mut map = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(user_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_after_max_failures_until_window_passes() {
        let l = LoginLimiter::default();
        let t0 = Instant::now();
        let keys = vec!["ip:1".to_string(), "user:a".to_string()];
        for _ in 0..MAX_FAILURES - 1 {
            l.record_failure(&keys, t0);
        }
        assert!(l.retry_after(&keys, t0).is_none());
        l.record_failure(&keys, t0);
        assert!(l.retry_after(&keys, t0).is_some());
        assert!(l.retry_after(&["ip:2".to_string()], t0).is_none());
        assert!(l.retry_after(&keys, t0 + WINDOW).is_none());
    }
}
