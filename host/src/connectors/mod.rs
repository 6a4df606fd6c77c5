//! connectors
