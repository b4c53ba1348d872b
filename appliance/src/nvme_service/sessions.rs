//! Lists each NVMe controller in the appliance's session registry, with its traffic,
//! and lets an admin's DELETE /api/v1/sessions/{id} tear it down.

use std::net::SocketAddr;
use std::sync::Arc;

use quarry_nvmeof::target::{IoKind, SessionHooks, SessionObserver};
use tokio_util::sync::CancellationToken;

use crate::sessions::{Protocol, SessionGuard, SessionRegistry};

/// Creates one registry entry per controller.
pub struct Hooks {
    registry: SessionRegistry,
}

impl Hooks {
    /// Hooks registering into `registry`.
    pub fn new(registry: SessionRegistry) -> Self {
        Hooks { registry }
    }
}

/// A controller's registry entry; dropped (and unlisted) with the controller.
struct Observer {
    guard: SessionGuard,
    client: crate::sessions::ClientCounters,
    cancel: CancellationToken,
}

impl SessionObserver for Observer {
    fn bytes_read(&self, n: u64) {
        self.guard.add_read(n);
        crate::telemetry::nvme_bytes(crate::telemetry::Direction::Read, n);
    }
    fn bytes_written(&self, n: u64) {
        self.guard.add_written(n);
        crate::telemetry::nvme_bytes(crate::telemetry::Direction::Write, n);
    }
    fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    fn io_completed(&self, kind: IoKind, elapsed: std::time::Duration, ok: bool) {
        self.client.op(!ok);
        crate::telemetry::nvme_io(kind, elapsed, ok);
    }
}

impl SessionHooks for Hooks {
    fn controller_created(
        &self,
        peer: &str,
        hostnqn: &str,
        subnqn: &str,
        cntlid: u16,
    ) -> Arc<dyn SessionObserver> {
        let addr: SocketAddr = peer
            .parse()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (guard, cancel) = self.registry.register(
            Protocol::NvmeTcp,
            hostnqn.to_string(),
            addr,
            format!("{subnqn} (cntlid {cntlid})"),
        );
        Arc::new(Observer {
            client: guard.counters(),
            guard,
            cancel,
        })
    }
}
