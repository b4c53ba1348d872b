//! Self-relative security descriptors (MS-DTYP 2.4.6): owner, group, DACL and SACL, decoded
//! from and encoded to the bytes that QUERY_INFO/SET_INFO (InfoType SECURITY), the `SecD`
//! create context and the storage layer carry. ACE types the server does not evaluate
//! (object and callback ACEs) are kept byte for byte so that a set followed by a query
//! returns what the client sent.

use super::sid::{Sid, SidError};

/// Length of the self-relative header: Revision, Sbz1, Control and the four offsets.
const HEADER_LEN: usize = 20;
/// Length of an ACL header: AclRevision, Sbz1, AclSize, AceCount, Sbz2.
const ACL_HEADER_LEN: usize = 8;
/// Most ACEs one ACL holds (AceCount is a u16); [`Acl::encode`] writes no more.
const MAX_ACES: usize = 0xFFFF;

/// The largest descriptor accepted or stored: an ACL's size is a u16, and a descriptor
/// holds at most two of them plus two SIDs.
pub const MAX_DESCRIPTOR_LEN: usize = 2 * 0xFFFF + 2 * 68 + 20;

/// SECURITY_DESCRIPTOR Control bits (MS-DTYP 2.4.6).
pub mod control {
    /// SE_DACL_PRESENT: a DACL is present (without one, a NULL DACL: no protection).
    pub const DACL_PRESENT: u16 = 0x0004;
    /// SE_SACL_PRESENT.
    pub const SACL_PRESENT: u16 = 0x0010;
    /// SE_DACL_AUTO_INHERIT_REQ.
    pub const DACL_AUTO_INHERIT_REQ: u16 = 0x0100;
    /// SE_DACL_AUTO_INHERITED.
    pub const DACL_AUTO_INHERITED: u16 = 0x0400;
    /// SE_DACL_PROTECTED: the DACL takes no inheritable ACEs from the parent.
    pub const DACL_PROTECTED: u16 = 0x1000;
    /// SE_SACL_PROTECTED.
    pub const SACL_PROTECTED: u16 = 0x2000;
    /// SE_SELF_RELATIVE: always set in the self-relative form.
    pub const SELF_RELATIVE: u16 = 0x8000;
    /// Bits that belong to the DACL part (replaced when the DACL is set).
    pub const DACL_BITS: u16 =
        DACL_PRESENT | 0x0008 | 0x0100 | DACL_AUTO_INHERITED | DACL_PROTECTED;
    /// Bits that belong to the SACL part.
    pub const SACL_BITS: u16 = SACL_PRESENT | 0x0020 | 0x0200 | 0x0800 | SACL_PROTECTED;
}

/// SecurityInformation bits (MS-DTYP 2.4.7): which parts a query returns or a set replaces.
pub mod secinfo {
    /// OWNER_SECURITY_INFORMATION.
    pub const OWNER: u32 = 0x0000_0001;
    /// GROUP_SECURITY_INFORMATION.
    pub const GROUP: u32 = 0x0000_0002;
    /// DACL_SECURITY_INFORMATION.
    pub const DACL: u32 = 0x0000_0004;
    /// SACL_SECURITY_INFORMATION.
    pub const SACL: u32 = 0x0000_0008;
}

/// ACE types evaluated by the access check (MS-DTYP 2.4.4.1).
pub mod ace_type {
    /// ACCESS_ALLOWED_ACE_TYPE.
    pub const ACCESS_ALLOWED: u8 = 0x00;
    /// ACCESS_DENIED_ACE_TYPE.
    pub const ACCESS_DENIED: u8 = 0x01;
    /// SYSTEM_AUDIT_ACE_TYPE.
    pub const SYSTEM_AUDIT: u8 = 0x02;
    /// SYSTEM_ALARM_ACE_TYPE.
    pub const SYSTEM_ALARM: u8 = 0x03;
}

/// AceFlags (MS-DTYP 2.4.4.1).
pub mod ace_flags {
    /// OBJECT_INHERIT_ACE: files below inherit it.
    pub const OBJECT_INHERIT: u8 = 0x01;
    /// CONTAINER_INHERIT_ACE: directories below inherit it.
    pub const CONTAINER_INHERIT: u8 = 0x02;
    /// NO_PROPAGATE_INHERIT_ACE: inherited one level only.
    pub const NO_PROPAGATE_INHERIT: u8 = 0x04;
    /// INHERIT_ONLY_ACE: not evaluated on this object.
    pub const INHERIT_ONLY: u8 = 0x08;
    /// INHERITED_ACE: came from the parent.
    pub const INHERITED: u8 = 0x10;
    /// The four inheritance-control flags.
    pub const INHERITANCE: u8 =
        OBJECT_INHERIT | CONTAINER_INHERIT | NO_PROPAGATE_INHERIT | INHERIT_ONLY;
}

/// Why bytes are not a security descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    /// Shorter than its header or a part it points to.
    #[error("security descriptor truncated")]
    Truncated,
    /// Revision other than 1.
    #[error("security descriptor revision {0} is not 1")]
    Revision(u8),
    /// Larger than [`MAX_DESCRIPTOR_LEN`].
    #[error("security descriptor of {0} bytes is too large")]
    TooLarge(usize),
    /// An offset points outside the descriptor.
    #[error("security descriptor offset out of range")]
    BadOffset,
    /// An ACL's revision is not 2 or 4, or its size or count do not fit.
    #[error("malformed ACL: {0}")]
    BadAcl(&'static str),
    /// An ACE's size does not fit its ACL or its body.
    #[error("malformed ACE: {0}")]
    BadAce(&'static str),
    /// A SID inside is malformed.
    #[error(transparent)]
    Sid(#[from] SidError),
}

/// What an ACE holds beyond its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AceBody {
    /// Allowed, denied, audit and alarm ACEs: a mask and a trustee.
    Basic {
        /// AccessMask.
        mask: u32,
        /// The trustee.
        sid: Sid,
    },
    /// Any other type (object, callback, label…): kept as bytes, never evaluated.
    Opaque(Vec<u8>),
}

/// One access control entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ace {
    /// AceType.
    pub ace_type: u8,
    /// AceFlags.
    pub flags: u8,
    /// Mask and trustee, or the raw body.
    pub body: AceBody,
}

impl Ace {
    /// An ACE of a basic type.
    pub fn basic(ace_type: u8, flags: u8, mask: u32, sid: Sid) -> Ace {
        Ace {
            ace_type,
            flags,
            body: AceBody::Basic { mask, sid },
        }
    }

    /// The mask and trustee of a basic ACE.
    pub fn mask_and_sid(&self) -> Option<(u32, &Sid)> {
        match &self.body {
            AceBody::Basic { mask, sid } => Some((*mask, sid)),
            AceBody::Opaque(_) => None,
        }
    }

    fn wire_len(&self) -> usize {
        4 + match &self.body {
            AceBody::Basic { sid, .. } => 4 + sid.wire_len(),
            AceBody::Opaque(b) => b.len(),
        }
    }
}

/// An access control list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    /// AclRevision (2, or 4 when object ACEs are present).
    pub revision: u8,
    /// The entries, in order (order matters: the first deny or allow of a bit wins).
    pub aces: Vec<Ace>,
}

impl Acl {
    /// An ACL of revision 2 with these entries.
    pub fn new(aces: Vec<Ace>) -> Acl {
        Acl { revision: 2, aces }
    }

    /// Bytes [`Acl::encode`] writes (at most [`MAX_ACES`] entries).
    fn wire_len(&self) -> usize {
        ACL_HEADER_LEN
            + self
                .aces
                .iter()
                .take(MAX_ACES)
                .map(Ace::wire_len)
                .sum::<usize>()
    }

    fn decode(buf: &[u8]) -> Result<Acl, DescriptorError> {
        let (head, _) = buf
            .split_first_chunk::<ACL_HEADER_LEN>()
            .ok_or(DescriptorError::Truncated)?;
        let revision = head[0];
        if !matches!(revision, 2 | 4) {
            return Err(DescriptorError::BadAcl("revision"));
        }
        let size = usize::from(u16::from_le_bytes([head[2], head[3]]));
        let count = usize::from(u16::from_le_bytes([head[4], head[5]]));
        if size < ACL_HEADER_LEN || size > buf.len() {
            return Err(DescriptorError::BadAcl("size"));
        }
        // Each ACE takes at least 8 bytes: this bounds the allocation by the input.
        if count > (size - ACL_HEADER_LEN) / 8 {
            return Err(DescriptorError::BadAcl("ACE count"));
        }
        // The ACEs, up to AclSize (checked above to be inside `buf`).
        let mut rest = buf
            .get(ACL_HEADER_LEN..size)
            .ok_or(DescriptorError::BadAcl("size"))?;
        let mut aces = Vec::with_capacity(count);
        for _ in 0..count {
            // An ACE (header or body) that does not fit in AclSize has a bad size.
            let (h, after) = rest
                .split_first_chunk::<4>()
                .ok_or(DescriptorError::BadAce("size"))?;
            let ace_type = h[0];
            let flags = h[1];
            let len = usize::from(u16::from_le_bytes([h[2], h[3]]));
            if len < 8 {
                return Err(DescriptorError::BadAce("size"));
            }
            let (body, tail) = after
                .split_at_checked(len - 4)
                .ok_or(DescriptorError::BadAce("size"))?;
            rest = tail;
            let body = if ace_type <= ace_type::SYSTEM_ALARM {
                let (mask, sid) = body
                    .split_first_chunk::<4>()
                    .ok_or(DescriptorError::BadAce("size"))?;
                // `Sid::decode` reads only inside the ACE body, so the SID cannot overrun it.
                let (sid, _) = Sid::decode(sid)?;
                AceBody::Basic {
                    mask: u32::from_le_bytes(*mask),
                    sid,
                }
            } else {
                AceBody::Opaque(body.to_vec())
            };
            aces.push(Ace {
                ace_type,
                flags,
                body,
            });
        }
        Ok(Acl { revision, aces })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        // AclSize is what this writes: the header and the first MAX_ACES entries.
        let size = self.wire_len().min(0xFFFF) as u16;
        out.push(self.revision);
        out.push(0);
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&(self.aces.len().min(MAX_ACES) as u16).to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        for ace in self.aces.iter().take(MAX_ACES) {
            out.push(ace.ace_type);
            out.push(ace.flags);
            out.extend_from_slice(&(ace.wire_len().min(0xFFFF) as u16).to_le_bytes());
            match &ace.body {
                AceBody::Basic { mask, sid } => {
                    out.extend_from_slice(&mask.to_le_bytes());
                    sid.encode(out);
                }
                AceBody::Opaque(b) => out.extend_from_slice(b),
            }
        }
    }
}

/// A security descriptor. `dacl: None` with [`control::DACL_PRESENT`] set is a NULL DACL
/// (everyone gets every right); without the bit, no DACL was given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecurityDescriptor {
    /// Control (SE_SELF_RELATIVE is added on encode).
    pub control: u16,
    /// Owner.
    pub owner: Option<Sid>,
    /// Primary group.
    pub group: Option<Sid>,
    /// Discretionary ACL.
    pub dacl: Option<Acl>,
    /// System ACL (audit): stored and returned, never evaluated.
    pub sacl: Option<Acl>,
}

impl SecurityDescriptor {
    /// Whether the descriptor says anything about the DACL (a present one or a NULL one).
    pub fn dacl_present(&self) -> bool {
        self.control & control::DACL_PRESENT != 0
    }

    /// Decodes the self-relative form.
    pub fn decode(buf: &[u8]) -> Result<SecurityDescriptor, DescriptorError> {
        if buf.len() > MAX_DESCRIPTOR_LEN {
            return Err(DescriptorError::TooLarge(buf.len()));
        }
        let (head, _) = buf
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(DescriptorError::Truncated)?;
        if head[0] != 1 {
            return Err(DescriptorError::Revision(head[0]));
        }
        let control = u16::from_le_bytes([head[2], head[3]]);
        // A part's offset field: 0 for none, else from the start of the descriptor.
        let offset = |b: [u8; 4]| u32::from_le_bytes(b) as usize;
        let part = |off: usize| -> Result<Option<&[u8]>, DescriptorError> {
            match off {
                0 => Ok(None),
                o if o < HEADER_LEN => Err(DescriptorError::BadOffset),
                o => match buf.get(o..) {
                    Some(p) if !p.is_empty() => Ok(Some(p)),
                    _ => Err(DescriptorError::BadOffset),
                },
            }
        };
        let sid_at = |off| -> Result<Option<Sid>, DescriptorError> {
            Ok(match part(off)? {
                Some(b) => Some(Sid::decode(b)?.0),
                None => None,
            })
        };
        let owner = sid_at(offset([head[4], head[5], head[6], head[7]]))?;
        let group = sid_at(offset([head[8], head[9], head[10], head[11]]))?;
        let sacl = match (
            control & control::SACL_PRESENT != 0,
            part(offset([head[12], head[13], head[14], head[15]]))?,
        ) {
            (true, Some(b)) => Some(Acl::decode(b)?),
            _ => None,
        };
        let dacl = match (
            control & control::DACL_PRESENT != 0,
            part(offset([head[16], head[17], head[18], head[19]]))?,
        ) {
            (true, Some(b)) => Some(Acl::decode(b)?),
            _ => None,
        };
        Ok(SecurityDescriptor {
            control,
            owner,
            group,
            dacl,
            sacl,
        })
    }

    /// Encodes the parts `info` ([`secinfo`] bits) selects in the self-relative form, as a
    /// QUERY_INFO answer does; `secinfo::OWNER | GROUP | DACL | SACL` encodes all.
    pub fn encode(&self, info: u32) -> Vec<u8> {
        let owner = self.owner.as_ref().filter(|_| info & secinfo::OWNER != 0);
        let group = self.group.as_ref().filter(|_| info & secinfo::GROUP != 0);
        let with_sacl = info & secinfo::SACL != 0;
        let with_dacl = info & secinfo::DACL != 0;
        let mut ctl =
            control::SELF_RELATIVE | (self.control & !(control::DACL_BITS | control::SACL_BITS));
        if with_sacl {
            ctl |= self.control & control::SACL_BITS;
        }
        if with_dacl {
            ctl |= self.control & control::DACL_BITS;
        }
        let sacl = self
            .sacl
            .as_ref()
            .filter(|_| with_sacl && ctl & control::SACL_PRESENT != 0);
        let dacl = self
            .dacl
            .as_ref()
            .filter(|_| with_dacl && ctl & control::DACL_PRESENT != 0);
        // The parts follow the header in this order, each at the offset its field names
        // (0 for an absent part); `wire_len` is exactly what each `encode` writes.
        let owner_len = owner.map_or(0, Sid::wire_len);
        let group_len = group.map_or(0, Sid::wire_len);
        let sacl_len = sacl.map_or(0, Acl::wire_len);
        let dacl_len = dacl.map_or(0, Acl::wire_len);
        let owner_at = HEADER_LEN;
        let group_at = owner_at + owner_len;
        let sacl_at = group_at + group_len;
        let dacl_at = sacl_at + sacl_len;
        let mut out = Vec::with_capacity(dacl_at + dacl_len);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&ctl.to_le_bytes());
        for (present, at) in [
            (owner.is_some(), owner_at),
            (group.is_some(), group_at),
            (sacl.is_some(), sacl_at),
            (dacl.is_some(), dacl_at),
        ] {
            let off = if present { at as u32 } else { 0 };
            out.extend_from_slice(&off.to_le_bytes());
        }
        if let Some(s) = owner {
            s.encode(&mut out);
        }
        if let Some(s) = group {
            s.encode(&mut out);
        }
        if let Some(a) = sacl {
            a.encode(&mut out);
        }
        if let Some(a) = dacl {
            a.encode(&mut out);
        }
        out
    }

    /// Replaces the parts `info` selects with those of `new` (SET_INFO semantics, MS-FSA
    /// 2.1.5.16): setting the DACL from a descriptor without SE_DACL_PRESENT leaves a NULL
    /// DACL, as Windows and Samba do.
    pub fn merge(&mut self, new: &SecurityDescriptor, info: u32) {
        if info & secinfo::OWNER != 0 {
            self.owner = new.owner.clone();
        }
        if info & secinfo::GROUP != 0 {
            self.group = new.group.clone();
        }
        if info & secinfo::DACL != 0 {
            self.control = (self.control & !control::DACL_BITS)
                | (new.control & control::DACL_BITS)
                | control::DACL_PRESENT;
            self.dacl = new.dacl.clone().filter(|_| new.dacl_present());
        }
        if info & secinfo::SACL != 0 {
            self.control =
                (self.control & !control::SACL_BITS) | (new.control & control::SACL_BITS);
            self.sacl = new
                .sacl
                .clone()
                .filter(|_| new.control & control::SACL_PRESENT != 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> usize {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
    }

    /// A descriptor as Windows returns it for a new file: owner, group and a DACL of an
    /// inherited full-control ACE for Everyone and an object ACE (type 5) kept opaque.
    fn sample() -> SecurityDescriptor {
        SecurityDescriptor {
            control: control::DACL_PRESENT | control::DACL_AUTO_INHERITED,
            owner: Some(Sid::new(5, &[21, 10, 20, 30, 1001])),
            group: Some(Sid::new(5, &[21, 10, 20, 30, 513])),
            dacl: Some(Acl {
                revision: 4,
                aces: vec![
                    Ace::basic(
                        ace_type::ACCESS_ALLOWED,
                        ace_flags::INHERITED,
                        0x001F_01FF,
                        Sid::world(),
                    ),
                    Ace {
                        ace_type: 5,
                        flags: 0,
                        body: AceBody::Opaque(vec![1, 2, 3, 4, 0, 0, 0, 0]),
                    },
                ],
            }),
            sacl: None,
        }
    }

    #[test]
    fn self_relative_form_round_trips_byte_for_byte() {
        let sd = sample();
        let bytes = sd.encode(secinfo::OWNER | secinfo::GROUP | secinfo::DACL);
        assert_eq!(
            &bytes[..4],
            &[1, 0, 0x04, 0x84],
            "revision, control with SELF_RELATIVE"
        );
        assert_eq!(u32_at(&bytes, 4), 20, "owner follows the header");
        assert_eq!(u32_at(&bytes, 12), 0, "no SACL");
        let back = SecurityDescriptor::decode(&bytes).expect("decodes");
        assert_eq!(back.owner, sd.owner);
        assert_eq!(back.dacl, sd.dacl);
        assert_eq!(back.encode(0xF), bytes);
    }

    #[test]
    fn a_query_returns_only_the_asked_parts() {
        let sd = sample();
        let only_owner = SecurityDescriptor::decode(&sd.encode(secinfo::OWNER)).expect("decodes");
        assert_eq!(only_owner.owner, sd.owner);
        assert_eq!(only_owner.group, None);
        assert!(!only_owner.dacl_present());
        assert_eq!(sd.encode(0).len(), 20, "nothing asked: the header alone");
    }

    #[test]
    fn null_and_empty_dacls_differ() {
        let mut sd = sample();
        let null = SecurityDescriptor {
            control: control::DACL_PRESENT,
            ..Default::default()
        };
        sd.merge(&null, secinfo::DACL);
        let back = SecurityDescriptor::decode(&sd.encode(0xF)).expect("decodes");
        assert!(back.dacl_present() && back.dacl.is_none(), "NULL DACL");
        sd.merge(
            &SecurityDescriptor {
                control: control::DACL_PRESENT,
                dacl: Some(Acl::new(vec![])),
                ..Default::default()
            },
            secinfo::DACL,
        );
        let back = SecurityDescriptor::decode(&sd.encode(0xF)).expect("decodes");
        assert_eq!(back.dacl, Some(Acl::new(vec![])), "empty DACL");
        sd.merge(&SecurityDescriptor::default(), secinfo::DACL);
        assert!(
            sd.dacl_present() && sd.dacl.is_none(),
            "absent DACL set: NULL"
        );
        assert_eq!(sd.owner, sample().owner, "owner untouched by a DACL set");
    }

    #[test]
    fn part_offsets_match_what_is_written() {
        // An over-long hand-built SID is written cut to 15 sub-authorities; the parts after
        // it must still be found where their offsets say.
        let mut sd = sample();
        sd.owner = Some(Sid {
            authority: 5,
            sub: vec![9; 20],
        });
        sd.sacl = Some(Acl::new(vec![Ace::basic(
            ace_type::SYSTEM_AUDIT,
            0,
            1,
            Sid::world(),
        )]));
        sd.control |= control::SACL_PRESENT;
        let bytes = sd.encode(0xF);
        let back = SecurityDescriptor::decode(&bytes).expect("decodes");
        assert_eq!(back.owner.map(|s| s.sub.len()), Some(15));
        assert_eq!(
            (back.group, back.dacl, back.sacl),
            (sd.group, sd.dacl, sd.sacl)
        );
        assert_eq!(u32_at(&bytes, 4), 20);
        assert_eq!(
            u32_at(&bytes, 8),
            20 + 8 + 4 * 15,
            "group right after the owner"
        );
    }

    #[test]
    fn aces_must_fit_the_acl_size() {
        // A DACL of AclSize 24 and AceCount 2 whose first ACE takes 14 bytes: the second
        // ACE's header would start 2 bytes before the end of the ACL.
        let mut b = vec![
            1, 0, 0x04, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0,
        ];
        b.extend_from_slice(&[2, 0, 24, 0, 2, 0, 0, 0]);
        b.extend_from_slice(&[5, 0, 14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            SecurityDescriptor::decode(&b),
            Err(DescriptorError::BadAce("size"))
        );
        b.extend_from_slice(&[0; 8]);
        assert_eq!(
            SecurityDescriptor::decode(&b),
            Err(DescriptorError::BadAce("size")),
            "the same when bytes follow the ACL"
        );
    }

    #[test]
    fn malformed_descriptors_are_refused() {
        let good = sample().encode(0xF);
        for cut in 0..good.len() {
            // Any truncation either fails cleanly or drops a trailing part: never panics.
            let _ = SecurityDescriptor::decode(&good[..cut]);
        }
        assert_eq!(
            SecurityDescriptor::decode(&good[..10]),
            Err(DescriptorError::Truncated)
        );
        let mut bad = good.clone();
        bad[4..8].copy_from_slice(&5000u32.to_le_bytes());
        assert_eq!(
            SecurityDescriptor::decode(&bad),
            Err(DescriptorError::BadOffset)
        );
        let mut bad = good.clone();
        let dacl = u32_at(&good, 16);
        bad[dacl + 4..dacl + 6].copy_from_slice(&0xFFFFu16.to_le_bytes());
        assert_eq!(
            SecurityDescriptor::decode(&bad),
            Err(DescriptorError::BadAcl("ACE count"))
        );
        let mut bad = good;
        bad[dacl + 8 + 2..dacl + 8 + 4].copy_from_slice(&4u16.to_le_bytes());
        assert_eq!(
            SecurityDescriptor::decode(&bad),
            Err(DescriptorError::BadAce("size"))
        );
    }
}
