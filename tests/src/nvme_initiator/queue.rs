//! One NVMe/TCP queue of the test initiator: a TCP connection speaking PDUs through the
//! `quarry-nvmeof` codec, with pipelined commands (in-capsule or R2T writes, C2H reads).

use std::collections::HashMap;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{Bytes, BytesMut};
use quarry_nvmeof::spec::fabrics::{ConnectCmd, ConnectData, FCTYPE_CONNECT};
use quarry_nvmeof::spec::{admin_opc, Cqe, Sgl, Sqe, SGL_ID_INCAPSULE, SGL_ID_TRANSPORT};
use quarry_nvmeof::tcp::{self, DecodeContext, Digests, IcReq, Pdu, PFV_1_0};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the initiator waits for any single PDU before calling the target hung.
pub const PDU_TIMEOUT: Duration = Duration::from_secs(30);

/// Free space the receive buffer keeps before each read from the socket: room for a
/// 128 KiB C2HData and its header in one read, so large reads are not split up.
const RECV_ROOM: usize = 256 * 1024;

/// A command to submit: the SQE (CID is assigned by the queue) and its data.
#[derive(Debug, Clone)]
pub struct Command {
    /// The SQE; its CID and SGL are filled in by the queue.
    pub sqe: Sqe,
    /// Host-to-controller data (writes). Shared, not copied: the queue sends it from
    /// this buffer, so a benchmark can hand the same payload to every command.
    pub write: Option<Bytes>,
    /// Bytes of controller-to-host data expected (reads, Identify, logs).
    pub read_len: u32,
}

/// A completed command.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The CQE (synthesised from a C2HData SUCCESS flag when the target used it).
    pub cqe: Cqe,
    /// Data received.
    pub data: Vec<u8>,
}

struct Pending {
    tag: u64,
    write: Option<Bytes>,
    read: Vec<u8>,
}

/// A connected NVMe/TCP queue.
pub struct Queue {
    stream: TcpStream,
    /// Bytes received and not yet taken as PDUs. Whole PDUs are split off its front
    /// without copying the bytes behind them.
    buf: BytesMut,
    digests: Digests,
    /// MAXH2CDATA the target granted.
    pub maxh2cdata: u32,
    cpda: u8,
    /// Queue ID.
    pub qid: u16,
    /// In-capsule data limit for writes on this queue.
    pub incapsule_limit: u32,
    /// Ask for SQ flow control to be disabled at Connect (CATTR bit 2); the target may
    /// then complete reads with a C2HData SUCCESS flag instead of a CapsuleResp.
    pub disable_sqflow: bool,
    next_cid: u16,
    pending: HashMap<u16, Pending>,
}

impl Queue {
    /// Opens the TCP connection and exchanges ICReq/ICResp.
    pub async fn open(addr: SocketAddr, digests: Digests) -> anyhow::Result<Queue> {
        let stream = TcpStream::connect(addr).await.context("connecting")?;
        stream.set_nodelay(true)?;
        let mut q = Queue {
            stream,
            buf: BytesMut::with_capacity(RECV_ROOM),
            digests: Digests::NONE,
            maxh2cdata: 0,
            cpda: 0,
            qid: 0,
            incapsule_limit: 0,
            disable_sqflow: false,
            next_cid: 1,
            pending: HashMap::new(),
        };
        let mut b = Vec::new();
        tcp::encode_icreq(
            &mut b,
            &IcReq {
                pfv: PFV_1_0,
                hpda: 0,
                dgst: digests.dgst(),
                maxr2t: 0,
            },
        );
        q.send_raw(&b).await?;
        let frame = q.read_frame().await?;
        match tcp::decode(&frame, &q.ctx()).map_err(|e| anyhow!("ICResp: {e}"))? {
            Pdu::IcResp(r) => {
                q.digests = Digests::from_dgst(r.dgst);
                q.maxh2cdata = r.maxh2cdata;
                q.cpda = r.cpda;
                if q.digests != digests {
                    bail!(
                        "target answered digests {:?}, asked {:?}",
                        q.digests,
                        digests
                    );
                }
            }
            other => bail!("expected ICResp, got {other:?}"),
        }
        Ok(q)
    }

    fn ctx(&self) -> DecodeContext {
        DecodeContext {
            digests: self.digests,
            ..Default::default()
        }
    }

    /// Writes raw bytes (for hostile tests).
    pub async fn send_raw(&mut self, b: &[u8]) -> anyhow::Result<()> {
        self.stream.write_all(b).await.context("sending")
    }

    /// Sends `parts` in order, as one PDU written from the caller's buffers (head, data,
    /// digest) with as few system calls as the socket allows.
    async fn send_parts(&mut self, mut parts: &mut [IoSlice<'_>]) -> anyhow::Result<()> {
        while !parts.is_empty() {
            let n = self.stream.write_vectored(parts).await.context("sending")?;
            if n == 0 {
                bail!("connection closed by target while sending");
            }
            IoSlice::advance_slices(&mut parts, n);
        }
        Ok(())
    }

    /// Sends a PDU whose `head` was encoded apart from its `data`, with the data digest
    /// when `digested` (the head encoders say so).
    async fn send_pdu(&mut self, head: &[u8], data: &[u8], digested: bool) -> anyhow::Result<()> {
        let digest = digested.then(|| tcp::data_digest(data));
        let mut parts = [
            IoSlice::new(head),
            IoSlice::new(data),
            IoSlice::new(digest.as_ref().map_or(&[][..], |d| &d[..])),
        ];
        self.send_parts(&mut parts).await
    }

    /// Reads one whole PDU (raw bytes); errors on EOF or timeout.
    pub async fn read_frame(&mut self) -> anyhow::Result<Bytes> {
        loop {
            if let Some(n) = tcp::frame_len(&self.buf, &self.ctx()).map_err(|e| anyhow!("{e}"))? {
                if self.buf.len() >= n {
                    return Ok(self.buf.split_to(n).freeze());
                }
                // The rest of this PDU, and room for the next, in one piece.
                self.buf.reserve(n - self.buf.len() + RECV_ROOM);
            } else {
                self.buf.reserve(RECV_ROOM);
            }
            let n = tokio::time::timeout(PDU_TIMEOUT, self.stream.read_buf(&mut self.buf))
                .await
                .map_err(|_| anyhow!("no PDU from target in {PDU_TIMEOUT:?}"))??;
            if n == 0 {
                bail!("connection closed by target");
            }
        }
    }

    /// Fabrics Connect for this queue; returns the CQE.
    #[allow(clippy::too_many_arguments)]
    pub async fn connect(
        &mut self,
        qid: u16,
        sqsize: u16,
        kato_ms: u32,
        cntlid: u16,
        subnqn: &str,
        hostnqn: &str,
        hostid: [u8; 16],
    ) -> anyhow::Result<Cqe> {
        let mut sqe = Sqe::new(admin_opc::FABRICS, 0);
        sqe.set_fctype(FCTYPE_CONNECT);
        ConnectCmd {
            recfmt: 0,
            qid,
            sqsize,
            cattr: if self.disable_sqflow { 1 << 2 } else { 0 },
            kato: kato_ms,
        }
        .write(&mut sqe);
        let data = ConnectData {
            hostid,
            cntlid,
            subnqn: subnqn.into(),
            hostnqn: hostnqn.into(),
        }
        .to_bytes();
        self.qid = qid;
        // Connect always travels in the capsule.
        let saved = self.incapsule_limit;
        self.incapsule_limit = data.len() as u32;
        let r = self
            .exec(Command {
                sqe,
                write: Some(data.into()),
                read_len: 0,
            })
            .await;
        self.incapsule_limit = saved;
        Ok(r?.cqe)
    }

    /// Runs one command to completion.
    pub async fn exec(&mut self, cmd: Command) -> anyhow::Result<Completion> {
        let mut out = None;
        let mut once = Some(cmd);
        self.pipeline(
            1,
            || once.take().map(|c| (0, c)),
            |_, c| {
                out = Some(c);
                Ok(())
            },
        )
        .await?;
        out.ok_or_else(|| anyhow!("no completion"))
    }

    /// Submits commands from `next` keeping up to `depth` in flight, handing each
    /// completion to `done` with its tag. Returns when `next` is exhausted and all
    /// completed.
    pub async fn pipeline(
        &mut self,
        depth: usize,
        mut next: impl FnMut() -> Option<(u64, Command)>,
        mut done: impl FnMut(u64, Completion) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut exhausted = false;
        loop {
            while !exhausted && self.pending.len() < depth {
                match next() {
                    Some((tag, c)) => self.submit(tag, c).await?,
                    None => exhausted = true,
                }
            }
            if self.pending.is_empty() {
                return Ok(());
            }
            if let Some((tag, c)) = self.step().await? {
                done(tag, c)?;
            }
        }
    }

    async fn submit(&mut self, tag: u64, mut cmd: Command) -> anyhow::Result<()> {
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1).max(1);
        cmd.sqe.set_cid(cid);
        let mut b = Vec::new();
        // In-capsule data is sent from the command's own buffer after the head.
        let mut incapsule = None;
        match &cmd.write {
            Some(w) if w.len() as u32 <= self.incapsule_limit => {
                cmd.sqe.set_sgl(Sgl {
                    addr: 0,
                    len: w.len() as u32,
                    id: SGL_ID_INCAPSULE,
                });
                let digested = tcp::encode_capsule_cmd_head(
                    &mut b,
                    &cmd.sqe,
                    w.len(),
                    self.digests,
                    self.cpda,
                );
                incapsule = cmd.write.take().map(|w| (w, digested));
            }
            Some(w) => {
                cmd.sqe.set_sgl(Sgl {
                    addr: 0,
                    len: w.len() as u32,
                    id: SGL_ID_TRANSPORT,
                });
                tcp::encode_capsule_cmd(&mut b, &cmd.sqe, &[], self.digests, self.cpda);
            }
            None => {
                cmd.sqe.set_sgl(Sgl {
                    addr: 0,
                    len: cmd.read_len,
                    id: SGL_ID_TRANSPORT,
                });
                tcp::encode_capsule_cmd(&mut b, &cmd.sqe, &[], self.digests, self.cpda);
            }
        }
        self.pending.insert(
            cid,
            Pending {
                tag,
                write: cmd.write,
                read: Vec::with_capacity(cmd.read_len as usize),
            },
        );
        match incapsule {
            Some((w, digested)) => self.send_pdu(&b, &w, digested).await,
            None => self.send_raw(&b).await,
        }
    }

    /// Handles one PDU from the target; returns a completion if it finished a command.
    async fn step(&mut self) -> anyhow::Result<Option<(u64, Completion)>> {
        let frame = self.read_frame().await?;
        let ctx = self.ctx();
        let pdu = tcp::decode(&frame, &ctx).map_err(|e| anyhow!("decoding target PDU: {e}"))?;
        match pdu {
            Pdu::CapsuleResp(r) => {
                let p = self
                    .pending
                    .remove(&r.cqe.cid)
                    .ok_or_else(|| anyhow!("CapsuleResp for unknown CID {}", r.cqe.cid))?;
                Ok(Some((
                    p.tag,
                    Completion {
                        cqe: r.cqe,
                        data: p.read,
                    },
                )))
            }
            Pdu::C2hData(d) => {
                let p = self
                    .pending
                    .get_mut(&d.cccid)
                    .ok_or_else(|| anyhow!("C2HData for unknown CID {}", d.cccid))?;
                if d.datao as usize != p.read.len() {
                    bail!(
                        "C2HData out of order: offset {} have {}",
                        d.datao,
                        p.read.len()
                    );
                }
                p.read.extend_from_slice(d.data);
                if d.flags & tcp::FLAG_SUCCESS != 0 {
                    let p = self
                        .pending
                        .remove(&d.cccid)
                        .ok_or_else(|| anyhow!("gone"))?;
                    let cqe = Cqe {
                        cid: d.cccid,
                        sqid: self.qid,
                        ..Default::default()
                    };
                    return Ok(Some((p.tag, Completion { cqe, data: p.read })));
                }
                Ok(None)
            }
            Pdu::R2t(r) => {
                let p = self
                    .pending
                    .get(&r.cccid)
                    .ok_or_else(|| anyhow!("R2T for unknown CID {}", r.cccid))?;
                let w = p
                    .write
                    .as_ref()
                    .ok_or_else(|| anyhow!("R2T for a command without data"))?;
                let start = r.r2to as usize;
                let end = start + r.r2tl as usize;
                if end > w.len() {
                    bail!("R2T outside the write: {start}..{end}");
                }
                // A shared slice of the command's buffer: sent from there, not copied.
                let data = w.slice(start..end);
                let chunk = self.maxh2cdata.max(4096) as usize;
                let mut b = Vec::new();
                let mut off = 0;
                while off < data.len() {
                    let n = chunk.min(data.len() - off);
                    b.clear();
                    let digested = tcp::encode_h2c_data_head(
                        &mut b,
                        r.cccid,
                        r.ttag,
                        (start + off) as u32,
                        n,
                        off + n == data.len(),
                        self.digests,
                        self.cpda,
                    );
                    self.send_pdu(&b, &data[off..off + n], digested).await?;
                    off += n;
                }
                Ok(None)
            }
            Pdu::C2hTermReq(t) => bail!("target terminated: FES {:#x} FEI {:#x}", t.fes, t.fei),
            other => bail!("unexpected PDU from target: {other:?}"),
        }
    }
}
