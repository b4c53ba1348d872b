//! DCE/RPC over named pipes on IPC$: enough of srvsvc for NetShareEnumAll and NetShareGetInfo.
