//! The NVMe/TCP listeners ("ports" in NVMe-oF terms): the command-line ones and those
//! added through the API, each a bound socket with its own accept task. The registry is
//! shared by the API (which binds, so a bad address is refused in the response) and the
//! service (which owns the target the accept tasks hand connections to).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// `tcp`.
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
    pending: Option<TcpListener>,
}

#[derive(Default)]
struct Inner {
    ports: Vec<Port>,
    serving: Option<(Arc<Target>, CancellationToken)>,
    next_portid: u16,
}

/// The listener registry. Cheap to share (`Arc`).
#[derive(Default)]
pub struct NvmePorts {
    inner: Mutex<Inner>,
}

fn spawn_accept(
    listener: TcpListener,
    target: Arc<Target>,
    advertise: Option<String>,
    stop: CancellationToken,
    local: SocketAddr,
) {
    tokio::spawn(async move {
        if let Err(e) = quarry_nvmeof::transport::serve(listener, target, advertise, stop).await {
            tracing::error!(listener = %local, error = %e, "NVMe/TCP listener failed");
        }
    });
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
        let local = listener.local_addr()?;
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
                );
                (stop, None)
            }
            None => (CancellationToken::new(), Some(listener)),
        };
        inner.ports.push(Port {
            local,
            info: PortInfo {
                id,
                transport: "tcp".into(),
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
