//! Pure renderers from analysis results to bytes.

pub mod csv;
pub mod json;
pub mod table;
