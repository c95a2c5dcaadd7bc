//! Gradient statistics: the per-step record, the stats protocol, and the noise-scale
//! estimators with smoothing, intervals and diagnostics (docs/STATISTICS.md).
//!
//! Entry points: [`read_ndjson`] (protocol v1 stream → records; [`read_ndjson_bounded`] keeps
//! at most a bound of them, merging consecutive steps, [`coarsen`]), [`analyze`]
//! (records and [`AnalyzeOptions`] → [`AnalyzeReport`]; [`analyze_parts`] for its parts).

pub mod analysis;
pub(crate) mod diagnostics;
pub mod estimate;
pub mod ingest;
pub mod record;
pub mod report;
pub mod smoothing;
pub mod text;

pub use analysis::compare::{Comparison, compare};
pub use analysis::settings::{EstimatorSettings, SmootherKind};
pub use analysis::{Analysis, AnalyzeOptions, InputCounts, StatsError, analyze, analyze_parts};
pub use diagnostics::{Diagnostic, DiagnosticKind, Severity};
pub use estimate::per_step::{EstimatorKind, TwoBatch, two_batch};
pub use estimate::window::{Drift, WindowEstimate};
pub use ingest::coarsen::{Coarsener, Coarsening, MAX_ANALYSED_RECORDS, RecordBound};
pub use ingest::protocol::{ProtocolError, parse_line};
pub use ingest::reader::{LineError, ReadOutcome, read_ndjson, read_ndjson_bounded};
pub use record::layer_map::{LayerMap, LayerName, intern};
pub use record::step::{LayerSq, StepConfig, StepStats};
pub use report::{AnalyzeReport, LayerPoint, LayerRow, Reason, StepRow, Summary, Verdict};
