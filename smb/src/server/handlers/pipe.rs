//! Named pipes on IPC$: the `srvsvc` pipe carries DCE/RPC that [`crate::rpc::SrvsvcPipe`]
//! answers (NetShareEnumAll / NetShareGetInfo), fed with the appliance's share list at open.

use std::sync::Arc;

use crate::proto::io::{encode_read_response_fixed, encode_write_response};
use crate::proto::ioctl::encode_ioctl_response;
use crate::proto::{status, FileId};
use crate::rpc::{PipeRead, ShareEntry, ShareKind, SrvsvcPipe};

use crate::server::dispatch::{HResult, Reply};
use crate::server::Backend;

/// Comment of the IPC$ entry.
const IPC_COMMENT: &str = "IPC Service";

/// Opens `\PIPE\srvsvc` with a snapshot of the share list.
pub async fn open_srvsvc(backend: Arc<dyn Backend>, computer: String) -> Result<SrvsvcPipe, u32> {
    let shares = tokio::task::spawn_blocking(move || backend.shares())
        .await
        .map_err(|_| status::INTERNAL_ERROR)?;
    let mut entries: Vec<ShareEntry> = shares
        .into_iter()
        .map(|s| ShareEntry {
            name: s.name,
            kind: ShareKind::Disk,
            comment: s.comment,
        })
        .collect();
    entries.push(ShareEntry {
        name: "IPC$".into(),
        kind: ShareKind::Ipc,
        comment: IPC_COMMENT.into(),
    });
    Ok(SrvsvcPipe::new(entries).with_server_info(computer, "Quarry"))
}

fn pipe_error(e: crate::rpc::RpcError) -> u32 {
    tracing::debug!(error = %e, "srvsvc pipe error");
    status::PIPE_BROKEN
}

/// WRITE on a pipe: feeds the RPC engine.
pub fn write(pipe: &mut SrvsvcPipe, data: &[u8]) -> HResult {
    pipe.write(data).map_err(pipe_error)?;
    let mut body = Vec::with_capacity(16);
    encode_write_response(&mut body, u32::try_from(data.len()).unwrap_or(u32::MAX));
    Ok(Reply::ok(body))
}

/// READ on a pipe: hands out the pending RPC response.
pub fn read(pipe: &mut SrvsvcPipe, max: u32) -> HResult {
    let Some(PipeRead { data, more }) = pipe.read(usize::try_from(max).unwrap_or(usize::MAX))
    else {
        return Err(status::PIPE_EMPTY);
    };
    let mut body = Vec::with_capacity(16 + data.len());
    encode_read_response_fixed(&mut body, u32::try_from(data.len()).unwrap_or(u32::MAX));
    body.extend_from_slice(&data);
    Ok(Reply::with_status(
        if more {
            status::BUFFER_OVERFLOW
        } else {
            status::SUCCESS
        },
        body,
    ))
}

/// FSCTL_PIPE_TRANSCEIVE: write then read one reply.
pub fn transceive(
    pipe: &mut SrvsvcPipe,
    ctl: u32,
    id: FileId,
    input: &[u8],
    max_out: usize,
) -> HResult {
    let r = pipe.transact(input, max_out).map_err(pipe_error)?;
    let (data, more) = r.map_or((Vec::new(), false), |r| (r.data, r.more));
    let mut body = Vec::with_capacity(48 + data.len());
    encode_ioctl_response(&mut body, ctl, id, &data);
    Ok(Reply::with_status(
        if more {
            status::BUFFER_OVERFLOW
        } else {
            status::SUCCESS
        },
        body,
    ))
}
