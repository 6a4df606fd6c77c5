//! Dataflow (stub, filled in next).
