//! SMB server state machine and tokio transport: connections, sessions, trees, opens, credits, dispatch.
