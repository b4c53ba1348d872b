//! The NVMe-oF listeners ("ports" in NVMe-oF terms): the command-line ones and those
//! added through the API, each a bound NVMe/TCP socket with its own accept task or a
//! bound NVMe/RDMA (RDMA-CM) listener with its own thread. The registry is
//! shared by the API (which binds, so a bad address is refused in the response) and the
//! service (which owns the target the accept tasks hand connections to).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use quarry_nvmeof::rdma::budget::MemoryBudget;
use quarry_nvmeof::rdma::RdmaListener;
use quarry_nvmeof::spec::log::{TRTYPE_RDMA, TRTYPE_TCP};
use quarry_nvmeof::target::{PortConfig, Target};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

/// Where a listener came from, and what it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PortRole {
    /// `--nvme-listen`: I/O and discovery.
    Cli,
    /// `--nvme-discovery-listen` (conventionally port 8009): listed nowhere in the
    /// discovery log, since hosts are meant to use it only to discover.
    Discovery,
    /// Added through `POST /api/v1/nvme/listeners`: I/O and discovery.
    Api,
}

/// A listener as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PortInfo {
    /// The API id (`null` for command-line listeners, which cannot be deleted).
    pub id: Option<i64>,
    /// `tcp` or `rdma`.
    pub transport: String,
    /// Bound address.
    pub address: String,
    /// Bound port.
    pub port: u16,
    /// Address given to hosts in discovery log entries, when not the bound one.
    pub advertise: Option<String>,
    /// Where it came from.
    pub role: PortRole,
    /// Port ID in discovery log entries.
    pub portid: u16,
}

struct Port {
    info: PortInfo,
    local: SocketAddr,
    stop: CancellationToken,
    /// Bound but not yet accepting: the service has not started.
    pending: Option<BoundListener>,
}

/// A bound listener of either transport.
pub enum BoundListener {
    /// NVMe/TCP.
    Tcp(TcpListener),
    /// NVMe/RDMA (RDMA-CM).
    Rdma(RdmaListener),
}

impl BoundListener {
    /// `tcp` or `rdma`.
    pub fn transport(&self) -> &'static str {
        match self {
            BoundListener::Tcp(_) => "tcp",
            BoundListener::Rdma(_) => "rdma",
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            BoundListener::Tcp(l) => l.local_addr(),
            BoundListener::Rdma(l) => Ok(l.local_addr()),
        }
    }
}

#[derive(Default)]
struct Inner {
    ports: Vec<Port>,
    serving: Option<(Arc<Target>, CancellationToken)>,
    next_portid: u16,
}

/// The listener registry. Cheap to share (`Arc`).
pub struct NvmePorts {
    inner: Mutex<Inner>,
    /// Bound on memory every NVMe/RDMA queue pair together may register.
    rdma_budget: Arc<MemoryBudget>,
}

impl Default for NvmePorts {
    fn default() -> Self {
        NvmePorts {
            inner: Mutex::default(),
            rdma_budget: MemoryBudget::new(quarry_nvmeof::rdma::DEFAULT_MEMORY_LIMIT),
        }
    }
}

fn spawn_accept(
    listener: BoundListener,
    target: Arc<Target>,
    advertise: Option<String>,
    stop: CancellationToken,
    local: SocketAddr,
    budget: &Arc<MemoryBudget>,
) {
    match listener {
        BoundListener::Tcp(listener) => {
            tokio::spawn(async move {
                if let Err(e) =
                    quarry_nvmeof::transport::serve(listener, target, advertise, stop).await
                {
                    tracing::error!(listener = %local, error = %e, "NVMe/TCP listener failed");
                }
            });
        }
        BoundListener::Rdma(listener) => listener.serve(target, advertise, budget.clone(), stop),
    }
}

impl NvmePorts {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a bound listener. It starts accepting at once if the service runs, else
    /// when [`NvmePorts::start`] is called. Returns its port ID.
    pub fn add(
        &self,
        listener: TcpListener,
        id: Option<i64>,
        role: PortRole,
        advertise: Option<String>,
    ) -> std::io::Result<u16> {
        self.add_bound(BoundListener::Tcp(listener), id, role, advertise)
    }

    /// Adds a bound listener of either transport, like [`NvmePorts::add`].
    pub fn add_bound(
        &self,
        listener: BoundListener,
        id: Option<i64>,
        role: PortRole,
        advertise: Option<String>,
    ) -> std::io::Result<u16> {
        let local = listener.local_addr()?;
        let transport = listener.transport();
        let mut inner = self.lock();
        inner.next_portid = inner.next_portid.wrapping_add(1).max(1);
        let portid = inner.next_portid;
        let (stop, pending) = match &inner.serving {
            Some((target, shutdown)) => {
                let stop = shutdown.child_token();
                spawn_accept(
                    listener,
                    target.clone(),
                    advertise.clone(),
                    stop.clone(),
                    local,
                    &self.rdma_budget,
                );
                (stop, None)
            }
            None => (CancellationToken::new(), Some(listener)),
        };
        inner.ports.push(Port {
            local,
            info: PortInfo {
                id,
                transport: transport.into(),
                address: local.ip().to_string(),
                port: local.port(),
                advertise,
                role,
                portid,
            },
            stop,
            pending,
        });
        Ok(portid)
    }

    /// Starts accepting on every pending listener, handing connections to `target`,
    /// until `shutdown` is cancelled.
    pub fn start(&self, target: Arc<Target>, shutdown: CancellationToken) {
        let mut inner = self.lock();
        for port in &mut inner.ports {
            if let Some(listener) = port.pending.take() {
                port.stop = shutdown.child_token();
                spawn_accept(
                    listener,
                    target.clone(),
                    port.info.advertise.clone(),
                    port.stop.clone(),
                    port.local,
                    &self.rdma_budget,
                );
            }
        }
        inner.serving = Some((target, shutdown));
    }

    /// Stops accepting on the API listener `id` (connections already made stay up
    /// until their hosts disconnect). Returns whether it was running.
    pub fn remove(&self, id: i64) -> bool {
        let mut inner = self.lock();
        let before = inner.ports.len();
        inner.ports.retain(|p| {
            if p.info.id == Some(id) {
                p.stop.cancel();
                false
            } else {
                true
            }
        });
        inner.ports.len() != before
    }

    /// Every listener, in the order they were added.
    pub fn list(&self) -> Vec<PortInfo> {
        self.lock().ports.iter().map(|p| p.info.clone()).collect()
    }

    /// The ports discovery log entries list (all but discovery-only listeners).
    pub fn discovery_ports(&self) -> Vec<PortConfig> {
        self.lock()
            .ports
            .iter()
            .filter(|p| p.info.role != PortRole::Discovery)
            .map(|p| PortConfig {
                portid: p.info.portid,
                traddr: p
                    .info
                    .advertise
                    .clone()
                    .unwrap_or_else(|| p.info.address.clone()),
                trsvcid: p.info.port.to_string(),
                trtype: if p.info.transport == "rdma" {
                    TRTYPE_RDMA
                } else {
                    TRTYPE_TCP
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ports_are_listed_and_removed() {
        let ports = NvmePorts::default();
        let cli = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let disc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api_port = api.local_addr().unwrap().port();
        ports.add(cli, None, PortRole::Cli, None).unwrap();
        ports.add(disc, None, PortRole::Discovery, None).unwrap();
        ports
            .add(api, Some(7), PortRole::Api, Some("10.0.2.2".into()))
            .unwrap();
        let d = ports.discovery_ports();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].traddr, "127.0.0.1");
        assert_eq!(d[1].traddr, "10.0.2.2");
        assert_eq!(d[1].trsvcid, api_port.to_string());
        assert_ne!(d[0].portid, d[1].portid);
        assert!(ports.remove(7));
        assert!(!ports.remove(7));
        assert_eq!(ports.list().len(), 2);
    }
}
