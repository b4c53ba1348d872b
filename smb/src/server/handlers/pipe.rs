//! Named pipes on IPC$: the `srvsvc` pipe carries DCE/RPC that [`crate::rpc`] answers
//! (NetShareEnumAll / NetShareGetInfo), fed with the appliance's share list.

use crate::proto::io::encode_read_response_fixed;
use crate::proto::status;

use crate::server::dispatch::{HResult, Reply};
use crate::server::state::PipeState;
use crate::server::Backend;

/// Feeds one RPC request written to pipe `name` and returns the RPC response bytes.
pub fn transact(name: &str, input: &[u8], backend: &dyn Backend) -> Result<Vec<u8>, u32> {
    let _ = (name, input, backend);
    // The DCE/RPC engine (crate::rpc) is not available yet.
    Err(status::NOT_SUPPORTED)
}

/// READ on a pipe: hands out the pending RPC response.
pub fn read(pipe: &mut PipeState, max: u32) -> HResult {
    if pipe.pending.is_empty() {
        return Err(status::PIPE_BROKEN);
    }
    let n = pipe
        .pending
        .len()
        .min(usize::try_from(max).unwrap_or(usize::MAX));
    let rest = pipe.pending.split_off(n);
    let data = std::mem::replace(&mut pipe.pending, rest);
    let mut body = Vec::with_capacity(16 + data.len());
    encode_read_response_fixed(&mut body, u32::try_from(data.len()).unwrap_or(u32::MAX));
    body.extend_from_slice(&data);
    if !pipe.pending.is_empty() {
        return Ok(Reply::with_status(status::BUFFER_OVERFLOW, body));
    }
    Ok(Reply::ok(body))
}
