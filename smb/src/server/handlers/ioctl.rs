//! IOCTL (MS-SMB2 3.3.5.15): VALIDATE_NEGOTIATE_INFO, named-pipe transceive for srvsvc, network
//! interface info, and the sparse-file FSCTLs. Anything else gets INVALID_DEVICE_REQUEST.

use crate::proto::ioctl::{
    encode_ioctl_response, network_interface_info, object_id_buffer, validate_negotiate_response,
    IoctlRequest, NetInterface, ValidateNegotiateInfo, FSCTL_CREATE_OR_GET_OBJECT_ID,
    FSCTL_DFS_GET_REFERRALS, FSCTL_PIPE_TRANSCEIVE, FSCTL_QUERY_ALLOCATED_RANGES,
    FSCTL_QUERY_NETWORK_INTERFACE_INFO, FSCTL_SET_SPARSE, FSCTL_SET_ZERO_DATA, FSCTL_SRV_COPYCHUNK,
    FSCTL_SRV_COPYCHUNK_WRITE, FSCTL_SRV_REQUEST_RESUME_KEY, FSCTL_VALIDATE_NEGOTIATE_INFO,
    IOCTL_IS_FSCTL,
};
use crate::proto::wire::{Put, Reader};
use crate::proto::{status, FileId};

use super::create::{FILE_APPEND_DATA, FILE_READ_DATA, FILE_WRITE_DATA};
use super::{blocking, file_of};
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};
use crate::server::MAX_IO_SIZE;

/// FSCTL_GET_COMPRESSION.
const FSCTL_GET_COMPRESSION: u32 = 0x0009_003C;
/// FSCTL_SET_COMPRESSION.
const FSCTL_SET_COMPRESSION: u32 = 0x0009_C040;
/// Size of one FILE_ALLOCATED_RANGE_BUFFER.
const ALLOCATED_RANGE_LEN: usize = 16;
/// Most allocated ranges returned at once.
const MAX_ALLOCATED_RANGES: usize = 4096;

fn reply(ctl: u32, id: FileId, out: &[u8]) -> Reply {
    let mut body = Vec::with_capacity(48 + out.len());
    encode_ioctl_response(&mut body, ctl, id, out);
    Reply::ok(body)
}

/// Handles IOCTL.
pub async fn ioctl(conn: &mut Connection, ctx: &mut Ctx<'_>, req: IoctlRequest<'_>) -> HResult {
    if req.flags & IOCTL_IS_FSCTL == 0 {
        return Err(status::NOT_SUPPORTED);
    }
    if req.max_output_response > MAX_IO_SIZE {
        return Err(status::INVALID_PARAMETER);
    }
    let max_out = usize::try_from(req.max_output_response).unwrap_or(0);
    match req.ctl_code {
        FSCTL_VALIDATE_NEGOTIATE_INFO => {
            let neg = conn
                .state
                .negotiated
                .clone()
                .ok_or(status::INVALID_PARAMETER)?;
            let v =
                ValidateNegotiateInfo::decode(req.input).map_err(|_| status::INVALID_PARAMETER)?;
            // A connection upgraded from SMB1 straight to 2.0.2 never saw the client's SMB2
            // NEGOTIATE: only the dialect can be checked.
            let ok = if neg.via_smb1 {
                v.dialects.contains(&neg.dialect)
            } else {
                v.capabilities == neg.client_capabilities
                    && v.guid == neg.client_guid
                    && v.security_mode == neg.client_security_mode
                    && v.dialects == neg.client_dialects
            };
            if !ok {
                tracing::warn!(peer = %conn.state.peer, "VALIDATE_NEGOTIATE_INFO mismatch: disconnecting");
                return Ok(Reply {
                    disconnect: true,
                    ..Reply::error(status::ACCESS_DENIED)
                });
            }
            let out = validate_negotiate_response(
                neg.server_capabilities,
                &conn.config.server_guid,
                neg.server_security_mode,
                neg.dialect,
            );
            Ok(reply(req.ctl_code, req.file_id, &out))
        }
        FSCTL_QUERY_NETWORK_INTERFACE_INFO => {
            let out =
                network_interface_info(&interfaces(&conn.config.interfaces, conn.state.local.ip()));
            Ok(reply(req.ctl_code, req.file_id, &out))
        }
        FSCTL_DFS_GET_REFERRALS => Err(status::NOT_FOUND),
        FSCTL_PIPE_TRANSCEIVE => {
            let id = ctx.resolve(req.file_id);
            let open = super::open(conn, ctx, req.file_id)?;
            let pipe = open.pipe.as_mut().ok_or(status::INVALID_DEVICE_REQUEST)?;
            super::pipe::transceive(pipe, req.ctl_code, id, req.input, max_out)
        }
        FSCTL_CREATE_OR_GET_OBJECT_ID => {
            let id = ctx.resolve(req.file_id);
            let open = super::open(conn, ctx, req.file_id)?;
            let f = file_of(open)?;
            let info = blocking(move || f.info()).await?;
            let out = object_id_buffer(info.file_id, 0);
            if out.len() > max_out {
                return Err(status::BUFFER_TOO_SMALL);
            }
            Ok(reply(req.ctl_code, id, &out))
        }
        crate::server::previous::FSCTL_SRV_ENUMERATE_SNAPSHOTS => {
            let id = ctx.resolve(req.file_id);
            let open = super::open(conn, ctx, req.file_id)?;
            if open.share.is_none() {
                return Err(status::INVALID_DEVICE_REQUEST);
            }
            let share = super::tree(conn, ctx)?.share.clone();
            let backend = conn.backend.clone();
            let times = blocking(move || Ok(backend.share_snapshots(&share))).await?;
            let out = crate::server::previous::encode_snapshot_array(&times, max_out)?;
            Ok(reply(req.ctl_code, id, &out))
        }
        FSCTL_SRV_REQUEST_RESUME_KEY => {
            super::copychunk::request_resume_key(conn, ctx, &req, max_out)
        }
        FSCTL_SRV_COPYCHUNK | FSCTL_SRV_COPYCHUNK_WRITE => {
            super::copychunk::copychunk(conn, ctx, &req, max_out).await
        }
        FSCTL_GET_COMPRESSION => {
            super::open(conn, ctx, req.file_id)?;
            if max_out < 2 {
                return Err(status::INVALID_PARAMETER);
            }
            // COMPRESSION_FORMAT_NONE: files are never compressed.
            Ok(reply(req.ctl_code, ctx.resolve(req.file_id), &[0, 0]))
        }
        FSCTL_SET_COMPRESSION => {
            super::open(conn, ctx, req.file_id)?;
            let format = Reader::new(req.input)
                .u16()
                .map_err(|_| status::INVALID_PARAMETER)?;
            if format != 0 {
                return Err(status::NOT_SUPPORTED);
            }
            Ok(reply(req.ctl_code, ctx.resolve(req.file_id), &[]))
        }
        FSCTL_SET_SPARSE => {
            let open = super::open(conn, ctx, req.file_id)?;
            if open.access & (FILE_WRITE_DATA | FILE_APPEND_DATA | 0x100) == 0 {
                return Err(status::ACCESS_DENIED);
            }
            let f = file_of(open)?;
            let sparse = req.input.first().is_none_or(|b| *b != 0);
            blocking(move || f.set_sparse(sparse)).await?;
            Ok(reply(req.ctl_code, ctx.resolve(req.file_id), &[]))
        }
        FSCTL_SET_ZERO_DATA => {
            let open = super::open(conn, ctx, req.file_id)?;
            if open.access & FILE_WRITE_DATA == 0 {
                return Err(status::ACCESS_DENIED);
            }
            let f = file_of(open)?;
            let lock_state = open
                .share
                .clone()
                .map(|s| (s, open.inode, open.file_id.volatile));
            let mut r = Reader::new(req.input);
            let off = r.u64().map_err(|_| status::INVALID_PARAMETER)?;
            let end = r.u64().map_err(|_| status::INVALID_PARAMETER)?;
            if let Some((s, inode, id)) = lock_state {
                s.locks()
                    .check_io(inode, id, off, end.saturating_sub(off), true)
                    .map_err(|e| e.nt_status())?;
            }
            if end < off {
                return Err(status::INVALID_PARAMETER);
            }
            blocking(move || f.zero_data(off, end - off)).await?;
            Ok(reply(req.ctl_code, ctx.resolve(req.file_id), &[]))
        }
        FSCTL_QUERY_ALLOCATED_RANGES => {
            let open = super::open(conn, ctx, req.file_id)?;
            if open.access & FILE_READ_DATA == 0 {
                return Err(status::ACCESS_DENIED);
            }
            let f = file_of(open)?;
            let mut r = Reader::new(req.input);
            let off = r.u64().map_err(|_| status::INVALID_PARAMETER)?;
            let len = r.u64().map_err(|_| status::INVALID_PARAMETER)?;
            if off.checked_add(len).is_none() || i64::try_from(off.saturating_add(len)).is_err() {
                return Err(status::INVALID_PARAMETER);
            }

            let max = (max_out / ALLOCATED_RANGE_LEN).min(MAX_ALLOCATED_RANGES);
            let (ranges, more) = blocking(move || f.allocated_ranges(off, len, max.max(1))).await?;
            if max == 0 && !ranges.is_empty() {
                // Not even one FILE_ALLOCATED_RANGE_BUFFER fits.
                return Err(status::BUFFER_TOO_SMALL);
            }
            let mut out = Vec::with_capacity(ranges.len() * 16);
            for rg in &ranges {
                out.put_u64(rg.offset);
                out.put_u64(rg.length);
            }
            let id = ctx.resolve(req.file_id);
            if more {
                let mut body = Vec::new();
                encode_ioctl_response(&mut body, req.ctl_code, id, &out);
                return Ok(Reply::with_status(status::BUFFER_OVERFLOW, body));
            }
            Ok(reply(req.ctl_code, id, &out))
        }
        _ => Err(status::INVALID_DEVICE_REQUEST),
    }
}

/// The interfaces to report: each listening address (a wildcard one as the address this
/// client reached), once each, with the speed and RSS capability of the NIC that holds
/// it. Addresses are numbered in listener order rather than by kernel interface index, so
/// that a client sees distinct addresses as distinct paths to bind channels over (clients
/// such as the `smb` crate skip entries whose index equals the one they are connected
/// through; two addresses on one NIC would otherwise never carry two channels).
fn interfaces(listening: &[std::net::SocketAddr], reached: std::net::IpAddr) -> Vec<NetInterface> {
    let nics = crate::server::nic::HostNics::load();
    interfaces_with(listening, reached, |addr| nics.facts_for(addr))
}

/// [`interfaces`] with the NIC facts supplied by `facts`.
fn interfaces_with(
    listening: &[std::net::SocketAddr],
    reached: std::net::IpAddr,
    facts: impl Fn(std::net::IpAddr) -> crate::server::nic::NicFacts,
) -> Vec<NetInterface> {
    let mut addrs: Vec<std::net::IpAddr> = Vec::new();
    for a in listening {
        let ip = if a.ip().is_unspecified() {
            reached
        } else {
            a.ip()
        };
        if !addrs.contains(&ip) {
            addrs.push(ip);
        }
    }
    if addrs.is_empty() {
        addrs.push(reached);
    }
    addrs
        .into_iter()
        .zip(1u32..)
        .map(|(addr, if_index)| {
            let nic = facts(addr);
            NetInterface {
                if_index,
                link_speed: nic.link_speed,
                rss_capable: nic.rss_capable,
                addr,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_are_the_listening_addresses() {
        let reached: std::net::IpAddr = [10, 0, 0, 5].into();
        let l = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let got = interfaces(&[l("127.0.0.1:445"), l("127.0.0.2:445")], reached);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].addr, std::net::IpAddr::from([127, 0, 0, 2]));
        assert_eq!(got[1].if_index, 2);
        let got = interfaces(&[l("0.0.0.0:445"), l("10.0.0.5:446")], reached);
        assert_eq!(got.len(), 1, "a wildcard stands for the reached address");
        assert_eq!(interfaces(&[], reached)[0].addr, reached);
    }

    #[test]
    fn interfaces_carry_their_nic_facts() {
        use crate::server::nic::NicFacts;
        let l = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let fast: std::net::IpAddr = [10, 0, 0, 5].into();
        let got = interfaces_with(&[l("10.0.0.5:445"), l("127.0.0.1:445")], fast, |ip| {
            if ip == fast {
                NicFacts {
                    link_speed: 100_000_000_000,
                    rss_capable: true,
                }
            } else {
                NicFacts::default()
            }
        });
        assert_eq!(
            (got[0].link_speed, got[0].rss_capable),
            (100_000_000_000, true)
        );
        assert_eq!(
            (got[1].link_speed, got[1].rss_capable),
            (crate::server::nic::UNKNOWN_LINK_SPEED, false)
        );
    }
}
