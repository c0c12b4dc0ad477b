//! Live reload: file-system events under the watched directory load the
//! configuration directory again, once the events settle; a configuration
//! that loads is put in force, one that does not is logged with the file
//! and the reason and the running one is kept.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::http::Health;
use crate::service::Service;
use crate::stats;

/// Events closer than this are one change (an editor's write, rename and
/// chmod; a symlink swap's several steps).
const SETTLE: Duration = Duration::from_millis(100);

/// Where the configuration is and how it is read.
pub struct Source {
    pub dir: PathBuf,
    pub watch: PathBuf,
    pub ignore_dotfiles: bool,
    pub merge_domains: bool,
    /// Unhealthy while no domain is configured
    /// (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub healthy_with_config: bool,
}

impl Source {
    pub fn load(&self) -> Result<Config, crate::config::ConfigError> {
        Config::load_dir(&self.dir, self.ignore_dotfiles, self.merge_domains)
    }
}

/// Watches `source` and reloads `service` on changes, until the returned
/// watcher is dropped. A directory that does not exist yet is watched
/// from its nearest existing ancestor.
pub fn watch(
    source: Source,
    service: Arc<Service>,
    health: Arc<Health>,
) -> notify::Result<notify::RecommendedWatcher> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = tx.send(());
        }
    })?;
    let mut target = source.watch.clone();
    while !target.exists() {
        match target.parent() {
            Some(p) => target = p.to_path_buf(),
            None => break,
        }
    }
    watcher.watch(&target, RecursiveMode::Recursive)?;
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Let the change settle: every event within SETTLE of the last.
            while let Ok(Some(())) = tokio::time::timeout(SETTLE, rx.recv()).await {}
            match source.load().map_err(|e| e.to_string()).and_then(|config| {
                let empty = config.is_empty();
                service.set_config(config).map(|()| empty)
            }) {
                Ok(empty) => {
                    if source.healthy_with_config {
                        health.set(!empty);
                    }
                    stats::config_load(true);
                    tracing::info!(dir = %source.dir.display(), "loaded the new configuration");
                }
                Err(e) => {
                    stats::config_load(false);
                    tracing::error!(
                        "kept the running configuration: error loading new configuration: {e}"
                    );
                }
            }
        }
    });
    Ok(watcher)
}
