//! Security identifiers (MS-DTYP 2.4.2): the binary form inside descriptors and the
//! `S-1-…` text form for logs and tests.

use std::fmt;

/// The most sub-authorities a SID may carry (MS-DTYP 2.4.2.2).
pub const MAX_SUB_AUTHORITIES: usize = 15;

/// Why bytes are not a SID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SidError {
    /// Fewer bytes than the SID says it has.
    #[error("SID truncated")]
    Truncated,
    /// Revision other than 1.
    #[error("SID revision {0} is not 1")]
    Revision(u8),
    /// More than [`MAX_SUB_AUTHORITIES`] sub-authorities.
    #[error("SID has {0} sub-authorities (at most 15)")]
    TooManySubAuthorities(u8),
}

/// A SID: an identifier authority and up to 15 sub-authorities. Owned, small, compared
/// by value: descriptors name owners, groups and ACE trustees with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sid {
    /// IdentifierAuthority (6 bytes, big-endian on the wire).
    pub authority: u64,
    /// SubAuthority values, in order.
    pub sub: Vec<u32>,
}

impl Sid {
    /// A SID from its authority and sub-authorities (at most 15 are kept).
    pub fn new(authority: u64, sub: &[u32]) -> Sid {
        Sid {
            authority: authority & 0xFFFF_FFFF_FFFF,
            sub: sub.iter().copied().take(MAX_SUB_AUTHORITIES).collect(),
        }
    }

    /// Everyone (S-1-1-0): in every token, guests' too.
    pub fn world() -> Sid {
        Sid::new(1, &[0])
    }

    /// CREATOR OWNER (S-1-3-0): in inheritable ACEs, stands for the new object's owner.
    pub fn creator_owner() -> Sid {
        Sid::new(3, &[0])
    }

    /// CREATOR GROUP (S-1-3-1): in inheritable ACEs, stands for the new object's group.
    pub fn creator_group() -> Sid {
        Sid::new(3, &[1])
    }

    /// OWNER RIGHTS (S-1-3-4): an ACE for it replaces the owner's implicit rights.
    pub fn owner_rights() -> Sid {
        Sid::new(3, &[4])
    }

    /// NT AUTHORITY\ANONYMOUS LOGON (S-1-5-7).
    pub fn anonymous() -> Sid {
        Sid::new(5, &[7])
    }

    /// NT AUTHORITY\Authenticated Users (S-1-5-11).
    pub fn authenticated_users() -> Sid {
        Sid::new(5, &[11])
    }

    /// NT AUTHORITY\SYSTEM (S-1-5-18).
    pub fn local_system() -> Sid {
        Sid::new(5, &[18])
    }

    /// BUILTIN\Administrators (S-1-5-32-544): owner of files no SMB client created.
    pub fn builtin_administrators() -> Sid {
        Sid::new(5, &[32, 544])
    }

    /// BUILTIN\Users (S-1-5-32-545).
    pub fn builtin_users() -> Sid {
        Sid::new(5, &[32, 545])
    }

    /// BUILTIN\Guests (S-1-5-32-546).
    pub fn builtin_guests() -> Sid {
        Sid::new(5, &[32, 546])
    }

    /// A SID under a domain (or machine) SID: the domain's sub-authorities plus `rid`.
    pub fn with_rid(&self, rid: u32) -> Sid {
        let mut sub = self.sub.clone();
        if sub.len() < MAX_SUB_AUTHORITIES {
            sub.push(rid);
        }
        Sid {
            authority: self.authority,
            sub,
        }
    }

    /// Parses the `S-1-<authority>-<sub>…` text form.
    pub fn parse(text: &str) -> Option<Sid> {
        let mut parts = text.strip_prefix("S-1-")?.split('-');
        let authority: u64 = parts.next()?.parse().ok()?;
        let sub = parts
            .map(|p| p.parse::<u32>().ok())
            .collect::<Option<Vec<u32>>>()?;
        (authority <= 0xFFFF_FFFF_FFFF && sub.len() <= MAX_SUB_AUTHORITIES)
            .then(|| Sid::new(authority, &sub))
    }

    /// Bytes of the binary form: what [`Sid::encode`] writes.
    pub fn wire_len(&self) -> usize {
        8 + 4 * self.sub.len().min(MAX_SUB_AUTHORITIES)
    }

    /// Decodes a SID at the start of `buf`; returns it and the bytes it took.
    pub fn decode(buf: &[u8]) -> Result<(Sid, usize), SidError> {
        let (&[revision, count, a0, a1, a2, a3, a4, a5], mut rest) =
            buf.split_first_chunk::<8>().ok_or(SidError::Truncated)?;
        if revision != 1 {
            return Err(SidError::Revision(revision));
        }
        if usize::from(count) > MAX_SUB_AUTHORITIES {
            return Err(SidError::TooManySubAuthorities(count));
        }
        // IdentifierAuthority is 6 bytes, big-endian.
        let authority = u64::from_be_bytes([0, 0, a0, a1, a2, a3, a4, a5]);
        let len = 8 + 4 * usize::from(count);
        let mut sub = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let (s, tail) = rest.split_first_chunk::<4>().ok_or(SidError::Truncated)?;
            sub.push(u32::from_le_bytes(*s));
            rest = tail;
        }
        Ok((Sid { authority, sub }, len))
    }

    /// Appends the binary form.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
        // `new` and `decode` keep at most 15 sub-authorities.
        out.push(self.sub.len().min(MAX_SUB_AUTHORITIES) as u8);
        out.extend_from_slice(&self.authority.to_be_bytes()[2..8]);
        for s in self.sub.iter().take(MAX_SUB_AUTHORITIES) {
            out.extend_from_slice(&s.to_le_bytes());
        }
    }
}

impl fmt::Display for Sid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S-1-{}", self.authority)?;
        for s in &self.sub {
            write!(f, "-{s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_sids_print_and_round_trip() {
        let s = Sid::builtin_administrators();
        assert_eq!(s.to_string(), "S-1-5-32-544");
        let mut b = Vec::new();
        s.encode(&mut b);
        assert_eq!(
            b,
            [1, 2, 0, 0, 0, 0, 0, 5, 32, 0, 0, 0, 0x20, 2, 0, 0],
            "MS-DTYP 2.4.2.2 layout"
        );
        assert_eq!(Sid::decode(&b), Ok((s, 16)));
    }

    #[test]
    fn malformed_sids_are_refused() {
        assert_eq!(Sid::decode(&[1, 1, 0, 0]), Err(SidError::Truncated));
        assert_eq!(
            Sid::decode(&[2, 0, 0, 0, 0, 0, 0, 1]),
            Err(SidError::Revision(2))
        );
        assert_eq!(
            Sid::decode(&[1, 16, 0, 0, 0, 0, 0, 1]),
            Err(SidError::TooManySubAuthorities(16))
        );
        assert_eq!(
            Sid::decode(&[1, 1, 0, 0, 0, 0, 0, 1, 0, 0]),
            Err(SidError::Truncated)
        );
    }

    #[test]
    fn wire_len_is_what_encode_writes() {
        // `sub` is public: a SID built by hand may hold more than encode writes.
        for n in [0, 1, 15, 16, 40] {
            let s = Sid {
                authority: 5,
                sub: vec![7; n],
            };
            let mut b = Vec::new();
            s.encode(&mut b);
            assert_eq!(s.wire_len(), b.len(), "{n} sub-authorities");
        }
    }

    #[test]
    fn rids_extend_a_domain_sid() {
        let domain = Sid::new(5, &[21, 1, 2, 3]);
        assert_eq!(domain.with_rid(1001).to_string(), "S-1-5-21-1-2-3-1001");
        assert_eq!(Sid::parse("S-1-5-21-1-2-3"), Some(domain));
        assert_eq!(Sid::parse("S-1-5-x"), None);
        assert_eq!(Sid::parse("S-2-5"), None);
    }
}
