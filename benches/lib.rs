//! Nothing: the benchmarks are in `benches/` (`cargo bench -p agent-loop-benches`).
