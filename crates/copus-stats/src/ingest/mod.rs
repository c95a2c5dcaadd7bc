//! Reading the stats protocol v1 into records: the line parsers (general, typed and the
//! hand-written scanner), the stream reader and the bounded record buffer for long runs.

pub mod coarsen;
pub mod protocol;
pub mod reader;
pub(crate) mod scan;
pub(crate) mod typed;
