//! The credit / sequence-number window of one connection (MS-SMB2 3.3.1.1, 3.3.5.2.3,
//! 3.3.5.2.5). Pure logic: the connection consumes message ids when requests arrive and grants
//! new ones in responses.

use std::collections::BTreeSet;

use super::{CREDIT_UNIT, MAX_CREDITS};

/// Why a request's message id or charge is not acceptable. The server answers
/// STATUS_INVALID_PARAMETER (charge) or disconnects (sequence) per MS-SMB2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CreditError {
    /// The message id is outside the granted window or already used.
    #[error("message id {0} not in the granted window")]
    BadMessageId(u64),
    /// The CreditCharge is too small for the payload, or larger than the credits held.
    #[error("credit charge {charge} invalid for {payload} bytes")]
    BadCharge {
        /// CreditCharge sent.
        charge: u16,
        /// Payload size.
        payload: u64,
    },
}

/// The window: message ids in `[low, high)` were granted; `used` are those above `low` already
/// consumed (requests may arrive out of order).
#[derive(Debug, Clone)]
pub struct CreditWindow {
    low: u64,
    high: u64,
    used: BTreeSet<u64>,
    multi_credit: bool,
}

impl Default for CreditWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl CreditWindow {
    /// A fresh connection holds one credit: message id 0.
    pub fn new() -> Self {
        Self {
            low: 0,
            high: 1,
            used: BTreeSet::new(),
            multi_credit: false,
        }
    }

    /// Enables multi-credit requests (dialect > 2.0.2 with LARGE_MTU).
    pub fn set_multi_credit(&mut self, on: bool) {
        self.multi_credit = on;
    }

    /// Credits the client still holds.
    pub fn outstanding(&self) -> u64 {
        (self.high - self.low).saturating_sub(self.used.len() as u64)
    }

    /// Checks that `charge` covers `payload` bytes (MS-SMB2 3.3.5.2.5).
    pub fn check_charge(&self, charge: u16, payload: u64) -> Result<(), CreditError> {
        if !self.multi_credit {
            return if payload > CREDIT_UNIT {
                Err(CreditError::BadCharge { charge, payload })
            } else {
                Ok(())
            };
        }
        let needed = payload.saturating_sub(1) / CREDIT_UNIT + 1;
        if u64::from(charge.max(1)) < needed {
            return Err(CreditError::BadCharge { charge, payload });
        }
        Ok(())
    }

    /// Consumes the ids `[message_id, message_id + charge)` of an arriving request.
    pub fn consume(&mut self, message_id: u64, charge: u16) -> Result<(), CreditError> {
        let n = if self.multi_credit {
            u64::from(charge.max(1))
        } else {
            1
        };
        let end = message_id
            .checked_add(n)
            .ok_or(CreditError::BadMessageId(message_id))?;
        if message_id < self.low || end > self.high {
            return Err(CreditError::BadMessageId(message_id));
        }
        if self.used.range(message_id..end).next().is_some() {
            return Err(CreditError::BadMessageId(message_id));
        }
        for id in message_id..end {
            self.used.insert(id);
        }
        while self.used.remove(&self.low) {
            self.low += 1;
        }
        Ok(())
    }

    /// Grants credits in a response: what the client asked for (at least 1 when it holds
    /// none, otherwise at least what it spent when `charge` > 0), capped so the window never
    /// exceeds [`MAX_CREDITS`]. Returns the number granted.
    pub fn grant(&mut self, requested: u16, charge: u16) -> u16 {
        let outstanding = self.outstanding();
        let room = MAX_CREDITS.saturating_sub(self.high - self.low);
        let mut want = u64::from(requested);
        if want == 0 && charge > 0 {
            want = 1;
        }
        if outstanding == 0 {
            want = want.max(1);
        }
        let granted = want.min(room);
        self.high += granted;
        u16::try_from(granted).unwrap_or(u16::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_and_grant() {
        let mut w = CreditWindow::new();
        w.consume(0, 1).unwrap();
        assert_eq!(w.outstanding(), 0);
        assert_eq!(w.grant(10, 1), 10);
        assert_eq!(w.outstanding(), 10);
        // Out-of-order arrival is fine; reuse is not.
        w.consume(3, 1).unwrap();
        w.consume(1, 1).unwrap();
        assert_eq!(w.consume(3, 1), Err(CreditError::BadMessageId(3)));
        assert_eq!(w.consume(11, 1), Err(CreditError::BadMessageId(11)));
        assert_eq!(w.outstanding(), 8);
    }

    #[test]
    fn multi_credit_charge() {
        let mut w = CreditWindow::new();
        w.set_multi_credit(true);
        w.consume(0, 1).unwrap();
        w.grant(200, 1);
        assert!(w.check_charge(128, 8 * 1024 * 1024).is_ok());
        assert!(w.check_charge(127, 8 * 1024 * 1024).is_err());
        assert!(w.check_charge(0, 65536).is_ok());
        w.consume(1, 128).unwrap();
        assert_eq!(w.outstanding(), 200 - 128);
        // A charge past the window is abuse.
        assert!(w.consume(129, 100).is_err());
    }

    #[test]
    fn window_is_capped() {
        let mut w = CreditWindow::new();
        w.consume(0, 1).unwrap();
        assert_eq!(w.grant(u16::MAX, 1) as u64, MAX_CREDITS);
        assert_eq!(w.grant(5, 0), 0);
    }
}
