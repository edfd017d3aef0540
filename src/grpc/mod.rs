//! gRPC: what the proxy reads of a call to route it. No I/O.
//!
//! * [`field`]: a field of a protobuf message found by its field numbers
//!   (`2.1`), without the message's schema;
//! * [`status`]: what makes a request a gRPC call and its deadline, and
//!   gRPC statuses, for the answers the proxy makes itself.

pub mod field;
pub mod status;
