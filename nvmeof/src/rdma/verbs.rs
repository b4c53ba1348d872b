//! Thin owners of libibverbs/librdmacm objects: each frees its object when dropped, in
//! the order the structs that hold them declare. Every call's failure becomes an
//! [`RdmaError::Verbs`] naming the call.

use std::ffi::CStr;
use std::io;
use std::os::raw::c_void;
use std::ptr;

use rdma_sys::*;

use super::RdmaError;

/// The last OS error as an [`RdmaError`] for `op`.
pub(crate) fn os_err(op: &'static str) -> RdmaError {
    RdmaError::Verbs {
        op,
        source: io::Error::last_os_error(),
    }
}

/// An error returned as a negative or positive errno value by `op`.
pub(crate) fn errno_err(op: &'static str, rc: i32) -> RdmaError {
    let code = if rc < 0 { -rc } else { rc };
    RdmaError::Verbs {
        op,
        source: if code == 0 || code == 1 {
            io::Error::last_os_error()
        } else {
            io::Error::from_raw_os_error(code)
        },
    }
}

/// Names of the RDMA devices present, or why none can be used.
pub(crate) fn devices() -> Result<Vec<String>, RdmaError> {
    if !std::path::Path::new("/dev/infiniband/rdma_cm").exists() {
        return Err(RdmaError::NoDevice(
            "no RDMA-CM device (/dev/infiniband/rdma_cm is missing: rdma_ucm not loaded or no RDMA hardware)"
                .into(),
        ));
    }
    let mut n = 0;
    // SAFETY: ibv_get_device_list returns a NULL-terminated array we free below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(RdmaError::NoDevice(format!(
            "cannot list RDMA devices: {}",
            io::Error::last_os_error()
        )));
    }
    let mut names = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: i < n entries of the array returned above.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: a device of the list has a NUL-terminated name.
        let name = unsafe { ibv_get_device_name(dev) };
        if !name.is_null() {
            // SAFETY: non-null, NUL-terminated.
            names.push(
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    // SAFETY: the list came from ibv_get_device_list.
    unsafe { ibv_free_device_list(list) };
    if names.is_empty() {
        return Err(RdmaError::NoDevice(
            "no RDMA devices found (for Soft-RoCE: rdma link add rxe0 type rxe netdev eth0)".into(),
        ));
    }
    Ok(names)
}

/// An RDMA-CM event channel.
pub(crate) struct EventChannel(pub *mut rdma_event_channel);

impl EventChannel {
    pub fn new() -> Result<Self, RdmaError> {
        // SAFETY: plain constructor.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            return Err(os_err("rdma_create_event_channel"));
        }
        let ch = EventChannel(ch);
        set_nonblocking(ch.fd())?;
        Ok(ch)
    }

    pub fn fd(&self) -> i32 {
        // SAFETY: the channel is live while self is.
        unsafe { (*self.0).fd }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; every id on it is gone.
        unsafe { rdma_destroy_event_channel(self.0) };
    }
}

pub(crate) fn set_nonblocking(fd: i32) -> Result<(), RdmaError> {
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(os_err("fcntl(F_GETFL)"));
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(os_err("fcntl(F_SETFL)"));
    }
    Ok(())
}

/// A protection domain.
pub(crate) struct Pd(pub *mut ibv_pd);

impl Pd {
    pub fn new(ctx: *mut ibv_context) -> Result<Self, RdmaError> {
        // SAFETY: ctx is the verbs context of a live cm id.
        let pd = unsafe { ibv_alloc_pd(ctx) };
        if pd.is_null() {
            return Err(os_err("ibv_alloc_pd"));
        }
        Ok(Pd(pd))
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP of the PD is destroyed first (field order).
        unsafe { ibv_dealloc_pd(self.0) };
    }
}

/// A completion channel (the interrupt path of a CQ), non-blocking.
pub(crate) struct CompChannel(pub *mut ibv_comp_channel);

impl CompChannel {
    pub fn new(ctx: *mut ibv_context) -> Result<Self, RdmaError> {
        // SAFETY: live verbs context.
        let cc = unsafe { ibv_create_comp_channel(ctx) };
        if cc.is_null() {
            return Err(os_err("ibv_create_comp_channel"));
        }
        let cc = CompChannel(cc);
        set_nonblocking(cc.fd())?;
        Ok(cc)
    }

    pub fn fd(&self) -> i32 {
        // SAFETY: live channel.
        unsafe { (*self.0).fd }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: its CQ is destroyed first (field order).
        unsafe { ibv_destroy_comp_channel(self.0) };
    }
}

/// A completion queue bound to a [`CompChannel`].
pub(crate) struct Cq(pub *mut ibv_cq);

impl Cq {
    pub fn new(ctx: *mut ibv_context, entries: i32, cc: &CompChannel) -> Result<Self, RdmaError> {
        // SAFETY: live context and channel.
        let cq = unsafe { ibv_create_cq(ctx, entries, ptr::null_mut(), cc.0, 0) };
        if cq.is_null() {
            return Err(os_err("ibv_create_cq"));
        }
        Ok(Cq(cq))
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the QP using it is destroyed first and every CQ event was acked.
        unsafe { ibv_destroy_cq(self.0) };
    }
}

/// A page-aligned buffer registered with a PD. The memory never moves while the MR
/// exists; the MR is deregistered before the memory is freed.
pub(crate) struct RegBuf {
    mr: *mut ibv_mr,
    ptr: *mut u8,
    len: usize,
}

const PAGE: usize = 4096;

impl RegBuf {
    pub fn new(pd: &Pd, len: usize, access: ibv_access_flags) -> Result<Self, RdmaError> {
        let len = len.max(PAGE).div_ceil(PAGE) * PAGE;
        let layout =
            std::alloc::Layout::from_size_align(len, PAGE).map_err(|e| RdmaError::Verbs {
                op: "buffer layout",
                source: io::Error::new(io::ErrorKind::InvalidInput, e),
            })?;
        // SAFETY: non-zero size layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(RdmaError::Verbs {
                op: "buffer allocation",
                source: io::Error::from(io::ErrorKind::OutOfMemory),
            });
        }
        // SAFETY: ptr..ptr+len is ours until drop.
        let mr = unsafe { ibv_reg_mr(pd.0, ptr.cast::<c_void>(), len, access.0 as i32) };
        if mr.is_null() {
            let e = os_err("ibv_reg_mr");
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(ptr, layout) };
            return Err(e);
        }
        Ok(RegBuf { mr, ptr, len })
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (*self.mr).lkey }
    }

    pub fn addr(&self, offset: usize) -> u64 {
        self.ptr as u64 + offset as u64
    }

    pub fn slice(&self, offset: usize, len: usize) -> &[u8] {
        let end = offset.saturating_add(len).min(self.len);
        let start = offset.min(end);
        // SAFETY: bounds clamped to the allocation; no RDMA operation writes this
        // range while it is read (the caller owns the slot/chunk).
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) }
    }

    pub fn write(&mut self, offset: usize, data: &[u8]) {
        let end = offset.saturating_add(data.len()).min(self.len);
        let start = offset.min(end);
        // SAFETY: bounds clamped; the range is owned by the caller's slot/chunk.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(start), end - start);
        }
    }
}

impl Drop for RegBuf {
    fn drop(&mut self) {
        // SAFETY: the MR is ours; the QP that used it is destroyed first.
        unsafe { ibv_dereg_mr(self.mr) };
        if let Ok(layout) = std::alloc::Layout::from_size_align(self.len, PAGE) {
            // SAFETY: allocated in new with this layout.
            unsafe { std::alloc::dealloc(self.ptr, layout) };
        }
    }
}

/// An eventfd used to wake a queue pair's thread (storage completions, controller
/// events, disconnects).
pub(crate) struct EventFd(pub i32);

impl EventFd {
    pub fn new() -> Result<Self, RdmaError> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(os_err("eventfd"));
        }
        Ok(EventFd(fd))
    }

    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to our eventfd; EAGAIN (counter full) is harmless.
        unsafe { libc::write(self.0, (&one as *const u64).cast::<c_void>(), 8) };
    }

    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes from our non-blocking eventfd.
        unsafe { libc::read(self.0, (&mut v as *mut u64).cast::<c_void>(), 8) };
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: our descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// Waits until one of `fds` is readable or `timeout_ms` passes; returns which were.
pub(crate) fn wait_readable(fds: &[i32], timeout_ms: i32) -> Vec<bool> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: p is a valid array of p.len() pollfds.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if rc <= 0 {
        return vec![false; fds.len()];
    }
    p.iter().map(|x| x.revents != 0).collect()
}

/// A textual status of a work completion.
pub(crate) fn wc_status_str(status: ibv_wc_status::Type) -> String {
    // SAFETY: returns a static string.
    let s = unsafe { ibv_wc_status_str(status) };
    if s.is_null() {
        return format!("status {status}");
    }
    // SAFETY: non-null static NUL-terminated string.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// Builds a `sockaddr_storage` for `addr`.
pub(crate) fn sockaddr(addr: std::net::SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
        }
    }
    ss
}

/// The peer address of a connected cm id, as text (IPv4/IPv6), or "?".
pub(crate) fn peer_of(id: *mut rdma_cm_id) -> String {
    // SAFETY: id is a live cm id; dst_storage is large enough for either family.
    unsafe {
        let ss = &(*id).route.addr.dst_addr_union.dst_storage;
        match i32::from(ss.ss_family) {
            libc::AF_INET => {
                let sin = &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                format!("{ip}:{}", u16::from_be(sin.sin_port))
            }
            libc::AF_INET6 => {
                let sin6 = &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                format!("[{ip}]:{}", u16::from_be(sin6.sin6_port))
            }
            _ => "?".into(),
        }
    }
}
