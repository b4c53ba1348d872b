//! The SMB front end, wired to the appliance's state. (Being built: until the
//! protocol engine lands here, connections are accepted and closed at once.)

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// Serves SMB on `listener` until `shutdown` is cancelled.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = state;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => {
                if let Ok((_, peer)) = accepted {
                    tracing::warn!(%peer, "SMB connection refused: the SMB engine is not wired yet");
                }
            }
        }
    }
}
