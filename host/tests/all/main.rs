//! Integration tests of the host library's dataflow and file connectors, in
//! one test binary.

mod dataflow;
mod file_avro;
