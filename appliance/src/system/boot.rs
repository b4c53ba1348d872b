//! Boot-slot facts without I/O: which slot is running (from the kernel command line),
//! the systemd-boot entry file names with their boot counters, and the text of a new
//! entry. Kept pure so the A/B logic is unit-tested byte for byte.
//!
//! Entry files follow the Boot Loader Specification with boot counting:
//! `quarry-b+3.conf` (3 tries left, none done), `quarry-b+1-2.conf` (1 left, 2 done),
//! `quarry-b+0-3.conf` (bad: sorted last, never the default), `quarry-b.conf` (blessed).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Kernel command-line key naming the booted slot (written by image/build.sh).
pub const SLOT_ARG: &str = "quarry.slot=";
/// Boot tries systemd-boot gives a freshly written entry.
pub const BOOT_TRIES: u32 = 3;
/// Prefix of every Quarry loader entry.
pub const ENTRY_PREFIX: &str = "quarry-";

/// A root slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Slot {
    /// Partition `quarry-root-a`.
    A,
    /// Partition `quarry-root-b`.
    B,
}

impl Slot {
    /// The other slot (where an update goes).
    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    /// Lower-case letter used in names and the command line.
    pub fn letter(self) -> &'static str {
        match self {
            Slot::A => "a",
            Slot::B => "b",
        }
    }

    /// GPT partition name of the slot.
    pub fn partition_name(self) -> String {
        format!("quarry-root-{}", self.letter())
    }

    fn parse(s: &str) -> Option<Slot> {
        match s {
            "a" => Some(Slot::A),
            "b" => Some(Slot::B),
            _ => None,
        }
    }
}

/// The slot named on the kernel command line, if any (not booted from the image: none).
pub fn booted_slot(cmdline: &str) -> Option<Slot> {
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix(SLOT_ARG))
        .and_then(Slot::parse)
}

/// Kernel arguments of a new entry: the running ones minus those that name the slot,
/// the root or the boot loader's own additions, plus the new slot's.
pub fn entry_options(running_cmdline: &str, slot: Slot, root_partuuid: &str) -> String {
    let mut out = vec![
        format!("root=PARTUUID={root_partuuid}"),
        format!("{SLOT_ARG}{}", slot.letter()),
    ];
    out.extend(
        running_cmdline
            .split_whitespace()
            .filter(|w| {
                !(w.starts_with("root=")
                    || w.starts_with(SLOT_ARG)
                    || w.starts_with("initrd=")
                    || w.starts_with("BOOT_IMAGE="))
            })
            .map(str::to_string),
    );
    out.join(" ")
}

/// Text of a loader entry for `slot` running `version`.
pub fn entry_text(version: &str, slot: Slot, options: &str) -> String {
    let s = slot.letter();
    format!(
        "title Quarry {version} (slot {up})\nversion {version}\nsort-key quarry\nlinux /quarry/{s}/vmlinuz\ninitrd /quarry/{s}/initrd.img\noptions {options}\n",
        up = s.to_ascii_uppercase()
    )
}

/// File name of a new entry for `slot`, with the full boot counter.
pub fn new_entry_name(slot: Slot) -> String {
    format!("{ENTRY_PREFIX}{}+{BOOT_TRIES}.conf", slot.letter())
}

/// Boot-counting state of an entry, as its file name tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryState {
    /// Booted successfully once (counter removed by systemd-bless-boot).
    Good,
    /// Not yet proven: tries left.
    Trying {
        /// Boots left before the entry counts as bad.
        left: u32,
        /// Boots already attempted.
        done: u32,
    },
    /// Every try failed: systemd-boot no longer picks it.
    Bad {
        /// Boots attempted.
        done: u32,
    },
}

/// A Quarry loader entry on the ESP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct EntryName {
    /// Slot the entry boots.
    pub slot: Slot,
    /// Its boot-counting state.
    pub state: EntryState,
    /// File name on the ESP.
    pub file: String,
}

/// Parses `quarry-SLOT[+LEFT[-DONE]].conf`; other files are not ours (None).
pub fn parse_entry_name(file: &str) -> Option<EntryName> {
    let stem = file.strip_prefix(ENTRY_PREFIX)?.strip_suffix(".conf")?;
    let (slot, counter) = match stem.split_once('+') {
        Some((slot, counter)) => (slot, Some(counter)),
        None => (stem, None),
    };
    let slot = Slot::parse(slot)?;
    let state = match counter {
        None => EntryState::Good,
        Some(c) => {
            let (left, done) = match c.split_once('-') {
                Some((l, d)) => (l.parse().ok()?, d.parse().ok()?),
                None => (c.parse().ok()?, 0),
            };
            if left == 0 {
                EntryState::Bad { done }
            } else {
                EntryState::Trying { left, done }
            }
        }
    };
    Some(EntryName {
        slot,
        state,
        file: file.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_from_cmdline() {
        let c = "initrd=\\quarry\\a\\initrd.img root=PARTUUID=x quarry.slot=b ro console=ttyS0";
        assert_eq!(booted_slot(c), Some(Slot::B));
        assert_eq!(booted_slot("root=/dev/sda1 ro"), None);
        assert_eq!(booted_slot("quarry.slot=c"), None);
        assert_eq!(Slot::A.other(), Slot::B);
        assert_eq!(Slot::B.partition_name(), "quarry-root-b");
    }

    #[test]
    fn options_replace_root_and_slot() {
        let running = "initrd=\\quarry\\a\\initrd.img root=PARTUUID=aaaa quarry.slot=a rootfstype=erofs ro console=ttyS0,115200";
        assert_eq!(
            entry_options(running, Slot::B, "bbbb"),
            "root=PARTUUID=bbbb quarry.slot=b rootfstype=erofs ro console=ttyS0,115200"
        );
    }

    #[test]
    fn entry_text_is_a_valid_bls_entry() {
        let t = entry_text("0.2.0", Slot::B, "root=PARTUUID=bbbb quarry.slot=b ro");
        assert_eq!(
            t,
            "title Quarry 0.2.0 (slot B)\nversion 0.2.0\nsort-key quarry\nlinux /quarry/b/vmlinuz\ninitrd /quarry/b/initrd.img\noptions root=PARTUUID=bbbb quarry.slot=b ro\n"
        );
        assert_eq!(new_entry_name(Slot::B), "quarry-b+3.conf");
    }

    #[test]
    fn entry_names_with_counters() {
        let p = |f| parse_entry_name(f).map(|e| (e.slot, e.state));
        assert_eq!(p("quarry-a.conf"), Some((Slot::A, EntryState::Good)));
        assert_eq!(
            p("quarry-b+3.conf"),
            Some((Slot::B, EntryState::Trying { left: 3, done: 0 }))
        );
        assert_eq!(
            p("quarry-b+1-2.conf"),
            Some((Slot::B, EntryState::Trying { left: 1, done: 2 }))
        );
        assert_eq!(
            p("quarry-b+0-3.conf"),
            Some((Slot::B, EntryState::Bad { done: 3 }))
        );
        assert_eq!(p("debian.conf"), None);
        assert_eq!(p("quarry-c.conf"), None);
        assert_eq!(p("quarry-a+x.conf"), None);
        assert_eq!(p("quarry-a+1-y.conf"), None);
    }
}
