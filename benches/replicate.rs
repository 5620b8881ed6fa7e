//! Placeholder; replaced by the replication bench.
fn main() {}
