//! Progress bars on standard error (indicatif) for `simulate` and `replay`:
//! shown only when standard error is a terminal, and only once a run has
//! lasted about a second, so short runs and piped output never see one.
//! The bar is erased when the run ends: the report follows on stdout.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Runs shorter than this show no bar: it would only flicker.
const SHOW_AFTER: Duration = Duration::from_secs(1);
/// Updates between two looks at the clock: keeps an update to a counter
/// increment in the loops that call it.
const CHECK_EVERY: u32 = 4096;

/// What the bar counts.
#[derive(Clone, Copy)]
pub enum Unit {
    /// Bytes of a file of known size.
    Bytes,
    /// Items (requests, lines).
    Items(&'static str),
}

/// A bar that appears after [`SHOW_AFTER`] on a terminal, or never.
pub struct Progress {
    /// `None` when standard error is not a terminal.
    bar: Option<ProgressBar>,
    started: Instant,
    shown: bool,
    since_check: u32,
}

impl Progress {
    /// A bar towards `total` (a spinner when unknown), labelled `message`.
    pub fn new(message: &'static str, total: Option<u64>, unit: Unit) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
            let counts = match unit {
                Unit::Bytes => "{binary_bytes}/{binary_total_bytes}  {binary_bytes_per_sec}",
                Unit::Items(_) => "{human_pos}/{human_len} {msg}  {rate}",
            };
            let template = match total {
                Some(_) => {
                    format!("{{prefix}} [{{bar:30}}] {{percent:>3}}%  {counts}  eta {{eta}}")
                }
                None => "{prefix} {spinner} {human_pos} {msg}  {rate}".to_string(),
            };
            let style = ProgressStyle::with_template(&template)
                .expect("the templates are valid")
                .with_key(
                    "rate",
                    |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = w.write_str(&rate(state.per_sec()));
                    },
                )
                .progress_chars("#>-");
            bar.set_style(style);
            bar.set_prefix(message);
            if let Unit::Items(what) = unit {
                bar.set_message(what);
            }
            bar
        });
        Progress {
            bar,
            started: Instant::now(),
            shown: false,
            since_check: 0,
        }
    }

    /// Moves the bar to `position`; cheap enough to call for every item.
    pub fn set(&mut self, position: u64) {
        let Some(bar) = &self.bar else { return };
        self.since_check += 1;
        if self.since_check < CHECK_EVERY {
            return;
        }
        self.since_check = 0;
        bar.set_position(position);
        if !self.shown && self.started.elapsed() >= SHOW_AFTER {
            self.shown = true;
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// Erases the bar (also done when it is dropped, e.g. on an error).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Items per second in three significant figures with a k or M suffix
/// (`3.57M/s`, `812/s`): indicatif's own shows every digit and four
/// decimals.
fn rate(per_sec: f64) -> String {
    let (value, suffix) = match per_sec {
        r if r >= 1e6 => (r / 1e6, "M"),
        r if r >= 1e3 => (r / 1e3, "k"),
        r => (r, ""),
    };
    let places = match value {
        v if v >= 100.0 => 0,
        v if v >= 10.0 => 1,
        _ => 2,
    };
    format!("{value:.places$}{suffix}/s")
}

#[cfg(test)]
mod tests {
    #[test]
    fn rates_have_three_figures() {
        assert_eq!(super::rate(3_574_235.503_1), "3.57M/s");
        assert_eq!(super::rate(81_234.0), "81.2k/s");
        assert_eq!(super::rate(812.4), "812/s");
        assert_eq!(super::rate(2.5), "2.50/s");
    }
}
