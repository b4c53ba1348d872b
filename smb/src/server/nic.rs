//! What the host says about the network interface behind an address: link speed and
//! whether it has several receive queues (RSS). FSCTL_QUERY_NETWORK_INTERFACE_INFO
//! reports these so that multichannel clients weigh paths by speed and open several
//! channels over an RSS NIC, as Windows does.
//!
//! The facts come from `getifaddrs` (address to interface name, read once per FSCTL) and sysfs
//! (`/sys/class/net/<name>/speed` in Mb/s, `/sys/class/net/<name>/queues/rx-*`). The
//! parsing is kept apart from the reading so it is unit-tested byte for byte.

use std::net::IpAddr;
use std::path::Path;

/// Link speed reported when the host does not know one (loopback, virtual NICs, no
/// driver support): 1 Gb/s, the same default Samba uses.
pub const UNKNOWN_LINK_SPEED: u64 = 1_000_000_000;
/// Where Linux publishes per-interface facts.
const SYSFS_NET: &str = "/sys/class/net";
/// Most receive-queue entries counted (a sanity bound on a sysfs listing).
const MAX_RX_QUEUES: usize = 4096;

/// Speed and RSS capability of one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicFacts {
    /// Link speed in bits per second.
    pub link_speed: u64,
    /// More than one receive queue.
    pub rss_capable: bool,
}

impl Default for NicFacts {
    fn default() -> Self {
        Self {
            link_speed: UNKNOWN_LINK_SPEED,
            rss_capable: false,
        }
    }
}

/// The host's addresses and the interfaces holding them, read once (one `getifaddrs`)
/// for every address an FSCTL reports.
#[derive(Debug, Default)]
pub struct HostNics {
    addrs: Vec<(IpAddr, String)>,
}

impl HostNics {
    /// Reads the host's interface addresses; none when the host refuses (the FSCTL
    /// then reports defaults rather than failing).
    pub fn load() -> HostNics {
        match if_addrs::get_if_addrs() {
            Ok(all) => HostNics {
                addrs: all.into_iter().map(|i| (i.ip(), i.name)).collect(),
            },
            Err(e) => {
                tracing::debug!(error = %e, "getifaddrs failed");
                HostNics::default()
            }
        }
    }

    /// The facts for the interface holding `addr`; defaults when the address is on no
    /// interface or the host does not say (never an error: the FSCTL must still answer).
    pub fn facts_for(&self, addr: IpAddr) -> NicFacts {
        match self.interface_of(addr) {
            Some(name) => facts_of(Path::new(SYSFS_NET), name),
            None => NicFacts::default(),
        }
    }

    /// The name of the interface that holds `addr`.
    fn interface_of(&self, addr: IpAddr) -> Option<&str> {
        self.addrs
            .iter()
            .find(|(a, _)| *a == addr)
            .map(|(_, name)| name.as_str())
    }
}

/// Reads the facts of interface `name` under `sysfs` (a directory laid out like
/// /sys/class/net).
fn facts_of(sysfs: &Path, name: &str) -> NicFacts {
    // An interface name never holds a path separator; refuse one rather than read
    // outside the directory.
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return NicFacts::default();
    }
    let dir = sysfs.join(name);
    let link_speed = std::fs::read_to_string(dir.join("speed"))
        .ok()
        .and_then(|s| parse_speed(&s))
        .unwrap_or(UNKNOWN_LINK_SPEED);
    let rx_queues = std::fs::read_dir(dir.join("queues"))
        .map(|entries| {
            count_rx_queues(
                entries
                    .take(MAX_RX_QUEUES * 2)
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned()),
            )
        })
        .unwrap_or(0);
    NicFacts {
        link_speed,
        rss_capable: rx_queues > 1,
    }
}

/// sysfs `speed`: megabits per second as a decimal; -1 (or an unreadable value) when
/// the link is down or the driver does not say. Returns bits per second.
fn parse_speed(text: &str) -> Option<u64> {
    let mbps: i64 = text.trim().parse().ok()?;
    u64::try_from(mbps)
        .ok()
        .filter(|&m| m > 0)
        .and_then(|m| m.checked_mul(1_000_000))
}

/// Counts the `rx-N` entries of a sysfs `queues` directory.
fn count_rx_queues(names: impl Iterator<Item = String>) -> usize {
    names
        .filter(|n| {
            n.strip_prefix("rx-")
                .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
        })
        .take(MAX_RX_QUEUES)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_is_megabits_or_unknown() {
        assert_eq!(parse_speed("25000\n"), Some(25_000_000_000));
        assert_eq!(parse_speed("-1\n"), None);
        assert_eq!(parse_speed("0"), None);
        assert_eq!(parse_speed("fast"), None);
    }

    #[test]
    fn rx_queues_are_counted_by_name() {
        let names = ["rx-0", "rx-1", "tx-0", "rx-", "rx-x", "byte_queue_limits"];
        assert_eq!(count_rx_queues(names.iter().map(|s| s.to_string())), 2);
    }

    #[test]
    fn facts_come_from_a_sysfs_layout() {
        let dir = tempfile::tempdir().unwrap();
        let nic = dir.path().join("eth7");
        std::fs::create_dir_all(nic.join("queues/rx-0")).unwrap();
        std::fs::create_dir_all(nic.join("queues/rx-1")).unwrap();
        std::fs::create_dir_all(nic.join("queues/tx-0")).unwrap();
        std::fs::write(nic.join("speed"), "100000\n").unwrap();
        let got = facts_of(dir.path(), "eth7");
        assert_eq!(got.link_speed, 100_000_000_000);
        assert!(got.rss_capable);

        let lo = dir.path().join("lo");
        std::fs::create_dir_all(lo.join("queues/rx-0")).unwrap();
        std::fs::write(lo.join("speed"), "-1\n").unwrap();
        assert_eq!(facts_of(dir.path(), "lo"), NicFacts::default());
        assert_eq!(facts_of(dir.path(), ".."), NicFacts::default());
        assert_eq!(facts_of(dir.path(), "missing"), NicFacts::default());
    }

    #[test]
    fn loopback_is_found_on_this_host() {
        // Every Linux host has lo with 127.0.0.1, whose speed sysfs does not give.
        let nics = HostNics::load();
        let got = nics.facts_for(IpAddr::from([127, 0, 0, 1]));
        assert_eq!(got.link_speed, UNKNOWN_LINK_SPEED);
        assert_eq!(nics.interface_of(IpAddr::from([127, 0, 0, 1])), Some("lo"));
        assert_eq!(nics.interface_of(IpAddr::from([192, 0, 2, 1])), None);
    }
}
