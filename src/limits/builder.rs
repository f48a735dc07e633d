//! Making a limiter: [`LimitsBuilder`] (store, clock, where the config comes from) and the
//! shortcuts on [`Limits`] for the in-memory default.

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Active, Limits, Shared, maintenance};
use crate::clock::{Clock, SystemClock};
use crate::config::extension::Extensions;
use crate::config::source::{ConfigSource, SourceText};
use crate::config::{ConfigError, Extension};
use crate::reload::{Reloader, WatchError};
use crate::store::{MemoryStore, Store};
use crate::traffic::Traffic;

/// Builds a [`Limits`] with a chosen store or clock.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Limits;
/// use tollgate::clock::FakeClock;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let clock = FakeClock::new();
/// let limits = Limits::builder()
///     .clock(clock.clone())
///     .from_toml("[limits]\n\"/\" = \"1/s\"\n")?;
/// assert!(limits.check("me", 1).await?.allowed());
/// assert!(!limits.check("me", 1).await?.allowed());
/// clock.advance(Duration::from_secs(1));
/// assert!(limits.check("me", 1).await?.allowed());
/// # Ok(()) }
/// ```
#[must_use]
pub struct LimitsBuilder<St = MemoryStore> {
    store: St,
    clock: Option<std::sync::Arc<dyn Clock>>,
    extensions: Extensions,
}

impl<St: Store> LimitsBuilder<St> {
    /// Keeps buckets in `store` instead of the in-memory default.
    pub fn store<T: Store>(self, store: T) -> LimitsBuilder<T> {
        LimitsBuilder {
            store,
            clock: self.clock,
            extensions: self.extensions,
        }
    }

    /// Reads time from `clock` instead of the [`SystemClock`].
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(std::sync::Arc::new(clock));
        self
    }

    /// Lets the config hold a table of the embedding program's own, read and checked by
    /// `extension` on every load and reload; see [`config::extension`](crate::config::extension).
    pub fn extension(mut self, extension: impl Extension) -> Self {
        self.extensions.push(Arc::new(extension));
        self
    }

    /// Loads config files, later files overriding earlier ones rule by rule.
    pub fn load<P: AsRef<Path>>(
        self,
        paths: impl IntoIterator<Item = P>,
    ) -> Result<Limits<St>, ConfigError> {
        let sources = ConfigSource::parse_all(paths)?;
        let (reloader, texts) = Reloader::open(sources)?;
        self.build(texts, reloader)
    }

    /// Loads config files and re-applies them whenever they change; see
    /// [`reload`](crate::reload).
    pub fn watch<P: AsRef<Path>>(
        self,
        paths: impl IntoIterator<Item = P>,
    ) -> Result<Limits<St>, WatchError> {
        let limits = self.load(paths)?;
        limits.start_watching()?;
        Ok(limits)
    }

    /// Uses config text instead of files (errors name the file `<inline>`).
    pub fn from_toml(self, text: &str) -> Result<Limits<St>, ConfigError> {
        self.build(vec![SourceText::inline(text)], Reloader::inline())
    }

    fn build(self, texts: Vec<SourceText>, reloader: Reloader) -> Result<Limits<St>, ConfigError> {
        let reloader = reloader.with_extensions(self.extensions);
        let rules = reloader
            .compile(&texts, None)
            .map_err(ConfigError::Invalid)?;
        reloader.opened(&rules);
        metrics::gauge!("tollgate_config_generation").set(1.0);
        let traffic = Traffic::new(Traffic::DEFAULT_SPAN, Traffic::DEFAULT_RESOLUTION);
        let active = Active::new(rules, &traffic);
        if let Some(store) = self.store.housekeeping() {
            store.configure(active.store_rules());
        }
        let (sweeper, stop) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            active: ArcSwap::from_pointee(active),
            traffic,
            store: self.store,
            clock: self
                .clock
                .unwrap_or_else(|| std::sync::Arc::new(SystemClock::new())),
            reloader,
            in_flight: Arc::default(),
            controllers: parking_lot::Mutex::default(),
            keys_fetched: std::sync::atomic::AtomicU64::new(0),
            _sweeper: sweeper,
        });
        maintenance::restore(&shared);
        maintenance::start(Arc::downgrade(&shared), stop);
        Ok(Limits { shared })
    }
}

impl Limits {
    /// Loads config files into an in-memory limiter on the system clock.
    ///
    /// Several files layer: later files override earlier ones rule by rule, and setting
    /// by setting in `[key]`, `[client]` and `[response]`.
    pub fn load<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Result<Limits, ConfigError> {
        Limits::builder().load(paths)
    }

    /// Loads config files into an in-memory limiter and keeps it in step with them: every
    /// valid save applies within a second, an invalid one changes nothing and is reported.
    /// See [`reload`](crate::reload) for exactly what is watched and what survives.
    pub fn watch<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Result<Limits, WatchError> {
        Limits::builder().watch(paths)
    }

    /// An in-memory limiter on the system clock from config text.
    pub fn from_toml(text: &str) -> Result<Limits, ConfigError> {
        Limits::builder().from_toml(text)
    }

    /// A builder, to choose the store or the clock.
    pub fn builder() -> LimitsBuilder<MemoryStore> {
        LimitsBuilder {
            store: MemoryStore::new(),
            clock: None,
            extensions: Extensions::default(),
        }
    }
}
