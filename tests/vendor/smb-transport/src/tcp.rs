pub mod msg;
pub mod transport;

pub use msg::SmbTcpMessageHeader;
pub use transport::TcpTransport;
