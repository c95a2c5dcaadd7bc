//! The model and cluster to assume when a command opens data without a session file.

use clap::Args;

/// Model and cluster flags shared by `copus open` (stats files, dumps) and `copus watch`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ClusterArgs {
    /// Model profile (built-in name or .ron file).
    #[arg(long, default_value = "llama-7b")]
    pub model: String,
    /// Hardware profile (built-in name or .ron file).
    #[arg(long, default_value = "h100-sxm")]
    pub hardware: String,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 1, value_parser = super::at_least_one_u32)]
    pub nodes: u32,
    /// GPUs per node.
    #[arg(long, default_value_t = 8, value_parser = super::at_least_one_u32)]
    pub gpus_per_node: u32,
}

impl Default for ClusterArgs {
    fn default() -> Self {
        Self {
            model: "llama-7b".into(),
            hardware: "h100-sxm".into(),
            nodes: 1,
            gpus_per_node: 8,
        }
    }
}

impl ClusterArgs {
    /// An ad-hoc session named `name` for `source` on this model and cluster.
    pub fn session(
        &self,
        name: String,
        source: crate::session::DataSource,
    ) -> crate::session::Session {
        crate::session::Session::adhoc(
            name,
            source,
            &self.model,
            &self.hardware,
            self.nodes,
            self.gpus_per_node,
        )
    }
}
