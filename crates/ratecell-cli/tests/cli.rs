//! The `ratecell` command, run as a process: golden outputs for every
//! deterministic run, the shape of the real-time demo, the SVG and PNG
//! plots, shell completions, progress bars on a terminal only, and the
//! errors (message naming the option or the line and field, exit code).
//!
//! Goldens live in `tests/golden/`. After an intended change of output,
//! refresh them with
//!
//!     UPDATE_GOLDEN=1 cargo test --test cli
//!
//! and review the diff (`git diff tests/golden`) before committing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ratecell");

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Runs the command in `tests/golden`, so trace paths (and the messages
/// that name them) are short and stable.
fn ratecell(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(golden_dir())
        .output()
        .expect("the ratecell binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("stderr is UTF-8")
}

/// Runs a command that must succeed and returns its output. Standard
/// error is not a terminal here, so nothing (no progress bar) goes there.
fn ok(args: &[&str]) -> String {
    let o = ratecell(args);
    assert!(
        o.status.success(),
        "ratecell {args:?} failed ({:?}): {}",
        o.status.code(),
        stderr(&o)
    );
    assert_eq!(stderr(&o), "", "ratecell {args:?} wrote to stderr");
    stdout(&o)
}

/// Compares with `tests/golden/<name>`, or rewrites it when UPDATE_GOLDEN
/// is set.
fn golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (create it with UPDATE_GOLDEN=1 cargo test --test cli)",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "output differs from {} from line {}:\n--- expected\n{}\n--- actual\n{}\n\
             (if the change is intended: UPDATE_GOLDEN=1 cargo test --test cli)",
            path.display(),
            first + 1,
            expected
                .lines()
                .skip(first)
                .take(5)
                .collect::<Vec<_>>()
                .join("\n"),
            actual
                .lines()
                .skip(first)
                .take(5)
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
}

/// Runs a command that must fail with `code` and returns its stderr.
fn fails(args: &[&str], code: i32) -> String {
    let o = ratecell(args);
    assert_eq!(
        o.status.code(),
        Some(code),
        "ratecell {args:?}: stdout {}\nstderr {}",
        stdout(&o),
        stderr(&o)
    );
    stderr(&o)
}

#[test]
fn demo_simulated_part_is_golden() {
    let out = ok(&["demo", "--no-realtime"]);
    golden("demo.txt", &out);
    // Options without a command are the demo's.
    assert_eq!(ok(&["--no-realtime"]), out);
}

#[test]
fn demo_simulation_holds_every_algorithm_near_the_limit() {
    let out = ok(&["demo", "--no-realtime"]);
    let rows: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Processed"))
        .skip(2)
        .take(7)
        .collect();
    assert_eq!(rows.len(), 7);
    for row in rows {
        let cells: Vec<f64> = row
            .split_whitespace()
            .skip(1)
            .map(|c| c.parse().unwrap())
            .collect();
        assert_eq!(cells.len(), 8, "{row}");
        // Under the limit every request is served as offered; at 50 and
        // 100 per second no algorithm may serve more than the limit.
        assert_eq!(&cells[..3], &[1.0, 2.0, 5.0], "{row}");
        assert!(cells[6] <= 10.0 && cells[7] <= 10.0, "{row}");
        assert!(cells[6] >= 8.0 && cells[7] >= 8.0, "{row}");
    }
}

const ALGORITHMS: [&str; 7] = [
    "gcra",
    "leaky_bucket",
    "token_bucket",
    "fixed_window",
    "sliding_window",
    "bucketed_window",
    "sliding_log",
];

#[test]
fn default_demo_runs_the_real_time_part_too() {
    let o = ratecell(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let simulated = std::fs::read_to_string(golden_dir().join("demo.txt")).unwrap();
    assert!(
        out.starts_with(&simulated),
        "the default begins with the simulated part"
    );
    let real = &out[simulated.len()..];
    assert!(real.contains("Real clock, real threads"));
    // One row per algorithm, each with a simulated / real pair per phase
    // and for the denials (the values depend on the machine's timing).
    for name in ALGORITHMS {
        let row = real
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no real-time row for {name}:\n{real}"));
        assert_eq!(row.matches(" / ").count(), 5, "{row}");
    }
    // A short phase can show a burst above the limit; when a row does,
    // the note explains it, and only then.
    let over_limit = real
        .lines()
        .filter(|l| {
            ALGORITHMS
                .iter()
                .any(|a| l.trim_start().starts_with(&format!("{a} ")))
        })
        .flat_map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>())
        .filter(|c| c.contains('.'))
        .any(|c| c.parse::<f64>().unwrap() > 10.0);
    assert_eq!(
        real.contains("come from a short phase, not a broken"),
        over_limit,
        "{real}"
    );
}

#[test]
fn compare_is_golden() {
    let out = ok(&["compare"]);
    golden("compare.txt", &out);
    // Spot checks that hold whatever the table layout: the exact log never
    // admits more than the limit in a period, the fixed window doubles it
    // at the edge.
    let row = |name: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert_eq!(row("sliding_log")[4], "100");
    assert_eq!(row("fixed_window")[4], "200");
    assert_eq!(row("leaky_bucket")[2], "1");
}

#[test]
fn simulate_with_a_seed_is_golden() {
    let out = ok(&[
        "simulate",
        "--algorithm",
        "sliding_window",
        "--limit",
        "20",
        "--load",
        "poisson",
        "--rate",
        "50",
        "--duration",
        "5s",
        "--seed",
        "42",
    ]);
    golden("simulate_poisson.txt", &out);
    let other_seed = ok(&[
        "simulate",
        "--algorithm",
        "sliding_window",
        "--limit",
        "20",
        "--load",
        "poisson",
        "--rate",
        "50",
        "--duration",
        "5s",
        "--seed",
        "43",
    ]);
    assert_ne!(out, other_seed, "the seed drives the Poisson load");
}

#[test]
fn simulate_with_keys_is_golden() {
    let out = ok(&[
        "simulate",
        "--algorithm=token_bucket",
        "--limit=5",
        "--period=500ms",
        "--burst=8",
        "--keys=4",
        "--load=bursts",
        "--rate=60",
        "--duration=3s",
    ]);
    golden("simulate_keys.txt", &out);
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ratecell-cli-test-{}-{name}", std::process::id()))
}

#[test]
fn simulate_writes_an_svg_plot() {
    let path = temp_path("plot.svg");
    let out = ok(&[
        "simulate",
        "--algorithm",
        "fixed_window",
        "--load",
        "bursts",
        "--rate",
        "15",
        "--duration",
        "5s",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert!(out.contains("plot written to"));
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(
        svg.contains("fixed_window, limit 10 per 1s"),
        "title names the policy"
    );
    assert!(svg.contains("load bursts, 15/s"), "subtitle names the load");
    let texts = svg_texts(&svg);
    for legend in ["offered", "admitted", "limit (10/s)"] {
        assert!(texts.iter().any(|t| t == legend), "{legend}: {texts:?}");
    }
    assert!(
        svg.contains("requests per second") && svg.contains("time (s); bins of"),
        "axes"
    );
    assert!(svg.contains("<polyline") || svg.contains("<path"), "series");
}

/// The numbers a plot's text elements show: axis labels among them.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| t.split_once('>'))
        .map(|(_, rest)| rest.split('<').next().unwrap_or("").trim().to_string())
        .collect()
}

#[test]
fn plot_axis_labels_use_si_suffixes_and_fit_the_figure() {
    let path = temp_path("si.svg");
    ok(&[
        "simulate",
        "--algorithm",
        "token_bucket",
        "--limit",
        "4000",
        "--period",
        "1ms",
        "--load",
        "constant",
        "--rate",
        "8000000",
        "--duration",
        "20ms",
        "--plot",
        path.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let texts = svg_texts(&svg);
    assert!(
        texts.iter().any(|t| t.ends_with('M')),
        "no label in millions: {texts:?}"
    );
    // Axis labels are the texts without spaces.
    assert!(
        !texts.iter().any(|t| !t.contains(' ') && t.contains("000")),
        "a label without its suffix: {texts:?}"
    );
    assert!(texts.iter().any(|t| t == "limit (4M/s)"), "{texts:?}");
    // Every text starts inside the figure (plotters writes x="..").
    let width: f64 = svg
        .split("width=\"")
        .nth(1)
        .and_then(|w| w.split('"').next())
        .unwrap()
        .parse()
        .unwrap();
    for x in svg.split("<text x=\"").skip(1) {
        let x: f64 = x.split('"').next().unwrap().parse().unwrap();
        assert!((0.0..width).contains(&x), "text at x = {x} of {width}");
    }
}

#[test]
fn simulate_writes_a_png_plot() {
    let path = temp_path("plot.png");
    let out = ok(&[
        "simulate",
        "--algorithm",
        "sliding-window",
        "--load",
        "ramp",
        "--duration",
        "20s",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert!(out.contains("plot written to"), "{out}");
    let png = std::fs::read(&path).unwrap();
    if std::env::var_os("KEEP_PLOT").is_none() {
        std::fs::remove_file(&path).unwrap();
    } else {
        eprintln!("kept {}", path.display());
    }
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG file");
    // The IHDR chunk: width and height, big-endian.
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((w, h), (1100, 620));
}

#[test]
fn the_plot_path_is_checked_before_the_work() {
    for (path, message) in [
        (
            "/no/such/dir/plot.svg",
            "--plot: cannot write \"/no/such/dir/plot.svg\"",
        ),
        ("plot.jpg", "--plot: \"plot.jpg\" must end in .svg or .png"),
        ("plot", "must end in .svg or .png"),
    ] {
        let o = ratecell(&["simulate", "--plot", path]);
        assert_eq!(o.status.code(), Some(2), "{path}");
        assert_eq!(stdout(&o), "", "{path}: no report before the error");
        assert!(stderr(&o).contains(message), "{path}: {}", stderr(&o));
    }
    assert!(!golden_dir().join("plot.jpg").exists());
}

#[test]
fn algorithm_names_ignore_case_and_separators() {
    let args = |name: &'static str| {
        [
            "simulate",
            "--algorithm",
            name,
            "--limit",
            "20",
            "--load",
            "poisson",
            "--rate",
            "50",
            "--duration",
            "5s",
            "--seed",
            "42",
        ]
    };
    let golden_out = std::fs::read_to_string(golden_dir().join("simulate_poisson.txt")).unwrap();
    for name in ["Sliding-Window", "SLIDING_WINDOW", "sliding-window"] {
        assert_eq!(ok(&args(name)), golden_out, "{name}");
    }
    assert_eq!(
        ok(&["simulate", "--load", "BURSTS", "--duration", "1s"]),
        ok(&["simulate", "--load", "bursts", "--duration", "1s"])
    );
}

#[test]
fn completions_for_each_shell() {
    let bash = ok(&["completions", "bash"]);
    assert!(bash.contains("_ratecell()"), "a bash function");
    for word in ["simulate", "replay", "--algorithm", "--plot", "sliding_log"] {
        assert!(bash.contains(word), "bash completion lacks {word}");
    }
    // The script is valid bash.
    let check = Command::new("bash")
        .args(["-n", "-c", &bash])
        .output()
        .expect("bash runs");
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(ok(&["completions", "zsh"]).starts_with("#compdef ratecell"));
    let fish = ok(&["completions", "fish"]);
    assert!(fish.contains("complete -c ratecell"), "{fish}");
    assert!(
        fish.contains("bucketed_window"),
        "fish completes algorithm names"
    );
    ok(&["completions", "powershell"]);
    ok(&["completions", "elvish"]);
    let err = fails(&["completions", "tcsh"], 2);
    assert!(
        err.contains("\"tcsh\" is not one of bash, elvish, fish, powershell, zsh"),
        "{err}"
    );
}

/// Runs `ratecell args` with standard error on a pseudo-terminal (through
/// util-linux `script`), standard output to a file; returns what the
/// terminal showed, or `None` when `script` is missing.
fn on_a_terminal(args: &[&str]) -> Option<(String, String)> {
    let quoted: Vec<String> = std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect();
    shell_on_a_terminal("", &quoted.join(" "))
}

/// Runs the shell pipeline `input | ratecell-command > file` with a
/// pseudo-terminal for standard error; returns what the terminal showed and
/// what went to the file, or `None` when `script` is missing.
fn shell_on_a_terminal(input: &str, ratecell_command: &str) -> Option<(String, String)> {
    if Command::new("script").arg("--version").output().is_err() {
        return None;
    }
    // One file per call: tests run in parallel.
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = temp_path(&format!("tty-stdout-{call}.txt"));
    let command = format!("{input}{ratecell_command} > '{}'", out.display());
    let o = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .current_dir(golden_dir())
        .output()
        .expect("script runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout_text = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    Some((String::from_utf8_lossy(&o.stdout).into_owned(), stdout_text))
}

#[test]
fn progress_shows_on_a_terminal_for_long_runs_only() {
    // A short run shows nothing, even on a terminal.
    let Some((terminal, _)) = on_a_terminal(&["simulate", "--duration", "1s"]) else {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    };
    assert!(!terminal.contains("simulating"), "{terminal:?}");
    // A run of several seconds shows the bar on the terminal, then erases
    // it; the report is not mixed with it. 20 million requests, the most a
    // simulation offers, take about 3 s in a debug build (8 million took
    // 1.6 s once checks kept their decisions in registers: too close to
    // the bar's one second).
    let (terminal, report) = on_a_terminal(&[
        "simulate",
        "--limit",
        "1000000",
        "--load",
        "constant",
        "--rate",
        "2000000",
        "--duration",
        "10s",
    ])
    .unwrap();
    assert!(terminal.contains("simulating ["), "{terminal:?}");
    assert!(report.starts_with("ratecell simulate:"), "{report}");
    assert!(!report.contains("simulating"), "{report}");
}

#[test]
fn replay_shows_progress_on_a_terminal_once_it_takes_a_while() {
    // Standard input that pauses for 1.5 s in the middle: the replay has
    // lasted over a second when the second half arrives.
    let half: String = (0..10_000)
        .map(|i| format!("{},k{},1\n", 1_700_006_400_000_000_000u64 + i * 1000, i % 7))
        .collect();
    let trace = temp_path("slow-trace.csv");
    std::fs::write(&trace, &half).unwrap();
    let t = trace.display();
    let input = format!("(cat '{t}'; sleep 1.5; cat '{t}') | ");
    let shown = shell_on_a_terminal(&input, &format!("'{BIN}' replay -"));
    std::fs::remove_file(&trace).unwrap();
    let Some((terminal, report)) = shown else {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    };
    assert!(terminal.contains("replaying"), "{terminal:?}");
    assert!(report.contains("20000 requests from 7 keys"), "{report}");
    assert!(!report.contains("replaying"), "{report}");
}

#[test]
fn replay_csv_is_golden() {
    let out = ok(&["replay", "trace.csv", "--limit", "5", "--decisions"]);
    golden("replay_trace.txt", &out);
}

#[test]
fn replay_access_log_is_golden() {
    let out = ok(&[
        "replay",
        "access.log",
        "--algorithm",
        "fixed_window",
        "--limit",
        "3",
    ]);
    golden("replay_access.txt", &out);
}

/// The capacity the replay summary reports.
fn reported_capacity(out: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.contains("keyed table: capacity"))
        .unwrap();
    let after = line.split("capacity ").nth(1).unwrap();
    after.split(',').next().unwrap().parse().unwrap()
}

#[test]
fn replay_default_table_shrinks_for_large_states() {
    // Tables are allocated up front: a sliding log of limit 1000 costs
    // kilobytes per key, so the default must not be the full 65536 keys.
    let small = ok(&["replay", "trace.csv"]);
    assert_eq!(reported_capacity(&small), 65_536);
    let large = ok(&[
        "replay",
        "trace.csv",
        "--algorithm",
        "sliding_log",
        "--limit",
        "1000",
    ]);
    let capacity = reported_capacity(&large);
    assert!((1_000..65_536).contains(&capacity), "capacity {capacity}");
    let chosen = ok(&[
        "replay",
        "trace.csv",
        "--algorithm",
        "sliding_log",
        "--capacity",
        "7",
    ]);
    assert_eq!(reported_capacity(&chosen), 7);
}

#[test]
fn replay_takes_the_evict_overflow_policy_and_counts_live_evictions() {
    let out = ok(&[
        "replay",
        "trace.csv",
        "--capacity",
        "1",
        "--overflow",
        "evict",
    ]);
    assert!(
        out.contains("capacity 1, overflow evict; 4 keys tracked at the end, 0 live evictions"),
        "{out}"
    );
}

#[test]
fn replay_reads_standard_input() {
    let mut child = Command::new(BIN)
        .args(["replay", "-", "--limit", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"1700006400000000000,k,1\n1700006400000000000,k,1\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["all", "keys", "2", "1", "1", "50.0%"]),
        "{out}"
    );
}

#[test]
fn replay_reads_quoted_keys() {
    let out = ok(&["replay", "quoted.csv", "--limit", "1", "--decisions"]);
    golden("replay_quoted.txt", &out);
    assert!(out.contains("\"user, one\" cost 1"), "{out}");
}

#[test]
fn replay_reports_time_going_back() {
    let out = ok(&["replay", "backwards.csv"]);
    golden("replay_backwards.txt", &out);
    assert!(
        out.contains(
            "2 requests went back in time (the first at line 4, 300ms back; the furthest at line 6"
        ),
        "{out}"
    );
}

#[test]
fn replay_of_one_key_says_one_key() {
    let out = ok(&["replay", "one_key.csv"]);
    assert!(out.contains("3 requests from 1 key over"), "{out}");
    assert!(
        out.contains("1 key tracked at the end, 0 overflows"),
        "{out}"
    );
    // Few keys: one per-key table, not the same rows twice.
    assert_eq!(out.matches("\n  solo ").count(), 1, "{out}");
}

#[test]
fn an_unreadable_format_names_the_guess_and_the_formats() {
    let err = fails(&["replay", "events.jsonl"], 2);
    assert!(
        err.contains("events.jsonl:1: field 'timestamp_ns'"),
        "{err}"
    );
    assert!(
        err.contains("read as csv, guessed from the first line"),
        "{err}"
    );
    assert!(
        err.contains("clf: a Common or Combined Log Format"),
        "{err}"
    );
    assert!(err.contains("--format"), "{err}");
    // Told the format, the error does not second-guess it.
    let err = fails(&["replay", "events.jsonl", "--format", "csv"], 2);
    assert!(!err.contains("guessed"), "{err}");
    let err = fails(&["replay", "trace.csv", "--format", "clf"], 2);
    assert!(err.contains("trace.csv:1: field 'time'"), "{err}");
}

#[test]
fn replay_refuses_an_overlong_line_without_reading_it_whole() {
    let path = temp_path("long.csv");
    let mut text = b"1700006400000000000,a,1\n1700006400000000000,b,1\n".to_vec();
    // 8 MiB without a newline: refused at 1 MiB, with the line named.
    text.extend(std::iter::repeat_n(b'9', 8 << 20));
    std::fs::write(&path, &text).unwrap();
    let err = fails(&["replay", path.to_str().unwrap()], 2);
    std::fs::remove_file(&path).unwrap();
    assert!(err.contains(":3: the line is longer than 1 MiB"), "{err}");
    // The same on standard input, and on the first line.
    let mut child = Command::new(BIN)
        .args(["replay", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        // The replay stops reading at the limit: a write after that may
        // find the pipe closed.
        let _ = stdin.write_all(&vec![b'x'; 3 << 20]);
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("<stdin>:1: the line is longer than 1 MiB"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_bad_line_names_its_number_and_field() {
    let err = fails(&["replay", "bad_cost.csv"], 2);
    assert_eq!(
        err.trim_end(),
        "ratecell: bad_cost.csv:4: field 'cost': \"abc\" is not an unsigned integer"
    );
    // Skipped, counted and named on request; the other lines replayed.
    let report = ok(&["replay", "bad_cost.csv", "--skip-bad-lines"]);
    assert!(report.contains("3 requests"), "{report}");
    assert!(
        report.contains(
            "1 bad line skipped as unreadable (the first, line 4: field 'cost': \"abc\" is not an unsigned integer)"
        ),
        "{report}"
    );
    let err = fails(&["replay", "bad_time.log"], 2);
    assert!(err.contains("bad_time.log:3: field 'time':"), "{err}");
    assert!(err.contains("31/Nov/2023"), "{err}");
    let err = fails(&["replay", "bad_zone.log"], 2);
    assert!(
        err.contains("bad_zone.log:2: field 'time': \"[10/Oct/2000:13:55:37 -9999]\" has the time zone \"-9999\""),
        "{err}"
    );
}

#[test]
fn bad_options_name_the_option_and_its_range() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["simulate", "--limit", "0"],
            "--limit: 0 is outside 1..=4294967295",
        ),
        (
            &["simulate", "--limit", "ten"],
            "--limit: \"ten\" is not an unsigned integer",
        ),
        (
            &["simulate", "--period", "10ns"],
            "--period: 10 ns is outside 1000..=",
        ),
        (
            &["simulate", "--period", "soon"],
            "--period: \"soon\" is not a duration",
        ),
        (
            &["simulate", "--algorithm", "magic"],
            "--algorithm: \"magic\" is not one of gcra, leaky_bucket",
        ),
        (
            &["simulate", "--algorithm", "fixed_window", "--burst", "5"],
            "--burst: fixed_window has no burst: leave it 0 or equal to limit (10), not 5",
        ),
        (
            &[
                "simulate",
                "--algorithm",
                "bucketed_window",
                "--sub-windows",
                "7",
            ],
            "--sub-windows: 7 does not divide period_ns",
        ),
        (
            &[
                "simulate",
                "--algorithm",
                "bucketed_window",
                "--sub-windows",
                "65",
            ],
            "--sub-windows: 65 is outside 1..=64",
        ),
        (
            &["simulate", "--sub-windows", "5"],
            "--sub-windows: applies only to bucketed_window",
        ),
        (
            &["simulate", "--load", "tsunami"],
            "--load: \"tsunami\" is not one of constant, bursts, poisson, ramp",
        ),
        (
            &["simulate", "--rate", "-3"],
            "--rate: -3 is outside the valid range",
        ),
        (
            &["simulate", "--keys", "0"],
            "--keys: 0 is outside 1..=1000000",
        ),
        (
            &["simulate", "--capacity", "9"],
            "--capacity: applies only with --keys above 1",
        ),
        (
            &["simulate", "--rate", "1000000", "--duration", "1h"],
            "--rate x --duration",
        ),
        (
            &["simulate", "--frobnicate"],
            "unknown option '--frobnicate'",
        ),
        (&["simulate", "--limit"], "option --limit needs a value"),
        (&["replay"], "missing the trace FILE"),
        (
            &["replay", "trace.csv", "--capacity", "0"],
            "--capacity: a keyed limiter needs room for at least 1 key, not 0",
        ),
        (
            &["replay", "trace.csv", "--top", "0"],
            "--top: 0 is outside 1..=1000",
        ),
        (
            &["replay", "trace.csv", "--format", "json"],
            "--format: \"json\" is not one of auto, csv, clf",
        ),
        (
            &["replay", "trace.csv", "--overflow", "maybe"],
            "--overflow: \"maybe\" is not one of deny, allow, evict",
        ),
        (
            &["replay", "a.csv", "b.csv"],
            "unexpected argument \"b.csv\"",
        ),
        (
            &["replay", "trace.csv", "--decisions=yes"],
            "option --decisions takes no value",
        ),
        (
            &["--no-realtime", "simulate"],
            "--no-realtime is the demo's option; it cannot come before the command \"simulate\"",
        ),
        (&["demo", "--fast"], "unknown option '--fast'"),
        (&["launch"], "unknown command \"launch\""),
    ];
    for (args, message) in cases {
        let err = fails(args, 2);
        assert!(
            err.contains(message),
            "ratecell {args:?}: {err:?} lacks {message:?}"
        );
        assert!(err.starts_with("ratecell: "), "{err}");
    }
}

#[test]
fn a_repeated_option_keeps_its_last_value() {
    assert_eq!(
        ok(&["simulate", "--limit=5", "--limit", "20", "--duration", "1s"]),
        ok(&["simulate", "--limit", "20", "--duration", "1s"])
    );
}

#[test]
fn a_missing_file_is_not_a_usage_error() {
    let err = fails(&["replay", "no-such-trace.csv"], 1);
    assert!(err.contains("cannot open \"no-such-trace.csv\""), "{err}");
}

#[test]
fn every_command_has_help() {
    let top = ok(&["--help"]);
    for command in ["demo", "compare", "simulate", "replay", "completions"] {
        assert!(top.contains(command), "{top}");
        let help = ok(&[command, "--help"]);
        assert!(
            help.starts_with(&format!("usage: ratecell {command}")),
            "{help}"
        );
        assert_eq!(ok(&["help", command]), help);
    }
    assert_eq!(
        ok(&["--version"]).trim_end(),
        format!("ratecell {}", env!("CARGO_PKG_VERSION"))
    );
    let simulate = ok(&["simulate", "-h"]);
    for option in [
        "--algorithm",
        "--limit",
        "--period",
        "--burst",
        "--sub-windows",
        "--load",
        "--rate",
        "--duration",
        "--keys",
        "--seed",
        "--plot",
        "--also",
    ] {
        assert!(simulate.contains(option), "simulate --help lacks {option}");
    }
    let replay = ok(&["replay", "--help"]);
    for option in [
        "--decisions",
        "--format",
        "--capacity",
        "timestamp_ns,key[,cost]",
        "--also",
        "--from-snapshot",
        "--to-snapshot",
    ] {
        assert!(replay.contains(option), "replay --help lacks {option}");
    }
}

/// A time-ordered CSV trace of `n` requests over 20 keys, about 5 ms apart,
/// costs 1 to 3 (a fixed LCG: reproducible without a dependency).
fn generated_trace(n: usize) -> Vec<String> {
    let mut x: u64 = 0x2545_f491;
    let mut next = || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        x >> 33
    };
    let mut t = 1_700_006_400_000_000_000u64;
    (0..n)
        .map(|_| {
            t += next() % 10_000_000;
            format!("{t},user-{},{}", next() % 20, 1 + next() % 3)
        })
        .collect()
}

/// The decision lines of a `--decisions` run, without their "FILE:LINE: "
/// prefix.
fn decisions(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.contains(" cost ") && l.contains(": "))
        .map(|l| l.splitn(3, ": ").nth(2).unwrap_or(l).to_string())
        .collect()
}

#[test]
fn replay_continues_from_a_snapshot_exactly_as_one_run() {
    let lines = generated_trace(600);
    let whole = temp_path("whole.csv");
    let first = temp_path("first.csv");
    let second = temp_path("second.csv");
    let snap = temp_path("half.snap");
    std::fs::write(&whole, lines.join("\n")).unwrap();
    std::fs::write(&first, lines[..300].join("\n")).unwrap();
    std::fs::write(&second, lines[300..].join("\n")).unwrap();
    let policies: [&[&str]; 3] = [
        &[
            "--algorithm",
            "sliding_log",
            "--limit",
            "6",
            "--period",
            "1s",
        ],
        &[
            "--limit",
            "8",
            "--also",
            "algorithm=fixed_window,limit=40,period=2s",
            "--also",
            "algorithm=bucketed_window,limit=12,period=1s,sub-windows=4",
        ],
        &[
            "--algorithm",
            "token_bucket",
            "--limit",
            "5",
            "--burst",
            "9",
            "--also",
            "algorithm=sliding_log,limit=7,period=1s",
        ],
    ];
    for policy in policies {
        let run = |file: &Path, extra: &[&str]| {
            let mut args = vec!["replay", file.to_str().unwrap(), "--decisions"];
            args.extend_from_slice(policy);
            args.extend_from_slice(extra);
            ok(&args)
        };
        let all = decisions(&run(&whole, &[]));
        let out = run(&first, &["--to-snapshot", snap.to_str().unwrap()]);
        assert!(out.contains("saved to the snapshot"), "{out}");
        let before = decisions(&out);
        let out = run(&second, &["--from-snapshot", snap.to_str().unwrap()]);
        assert!(out.contains("started from the snapshot"), "{out}");
        let after = decisions(&out);
        assert_eq!(all.len(), 600);
        assert_eq!(before[..], all[..300], "{policy:?}: the first half");
        assert_eq!(
            after[..],
            all[300..],
            "{policy:?}: the rest after the restart"
        );
        assert!(
            all[300..].iter().any(|d| d.contains("denied")),
            "{policy:?}: the trace reaches the limits"
        );
        // A replay from nothing decides the second half differently: the
        // snapshot carried the states over.
        assert_ne!(decisions(&run(&second, &[]))[..], all[300..], "{policy:?}");
    }
    for path in [&whole, &first, &second, &snap] {
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn replay_snapshot_errors_name_the_option_that_differs() {
    let snap = temp_path("errors.snap");
    let s = snap.to_str().unwrap();
    ok(&[
        "replay",
        "trace.csv",
        "--limit",
        "5",
        "--also",
        "algorithm=fixed_window,limit=30,period=1m",
        "--to-snapshot",
        s,
    ]);
    let also = "algorithm=fixed_window,limit=30,period=1m";
    let cases: &[(&[&str], &str)] = &[
        (
            &["--limit", "6", "--also", also],
            "saved with --limit 5, the options give 6",
        ),
        (
            &["--limit", "5", "--algorithm", "sliding_log", "--also", also],
            "saved with --algorithm gcra, the options give sliding_log",
        ),
        (
            &[
                "--limit",
                "5",
                "--also",
                "algorithm=fixed_window,limit=30,period=2m",
            ],
            "saved with --also #1 field 'period' 1m, the options give 2m",
        ),
        (
            &["--limit", "5"],
            "the snapshot holds 2 limits, the options give 1",
        ),
        (
            &["--limit", "5", "--also", also, "--capacity", "100"],
            "saved with --capacity 65536, the options give 100",
        ),
    ];
    for (policy, says) in cases {
        let mut args = vec!["replay", "trace.csv", "--from-snapshot", s];
        args.extend_from_slice(policy);
        let err = fails(&args, 2);
        assert!(err.contains(says), "{policy:?}: {err}");
        assert!(err.contains("--from-snapshot"), "{err}");
    }
    // The matching options restore, with the snapshot's capacity.
    let out = ok(&[
        "replay",
        "trace.csv",
        "--limit",
        "5",
        "--also",
        also,
        "--from-snapshot",
        s,
    ]);
    assert!(out.contains("4 keys restored"), "{out}");
    assert!(out.contains("capacity 65536"), "{out}");
    // Missing, damaged, unwritable.
    let err = fails(
        &["replay", "trace.csv", "--from-snapshot", "no-such.snap"],
        1,
    );
    assert!(err.contains("--from-snapshot no-such.snap"), "{err}");
    let bytes = std::fs::read(&snap).unwrap();
    std::fs::write(&snap, &bytes[..bytes.len() - 3]).unwrap();
    let err = fails(
        &[
            "replay",
            "trace.csv",
            "--limit",
            "5",
            "--also",
            also,
            "--from-snapshot",
            s,
        ],
        2,
    );
    assert!(err.contains("truncated"), "{err}");
    std::fs::write(&snap, b"a trace, not a snapshot\n").unwrap();
    let err = fails(&["replay", "trace.csv", "--from-snapshot", s], 2);
    assert!(err.contains("not a ratecell snapshot"), "{err}");
    let err = fails(
        &[
            "replay",
            "trace.csv",
            "--to-snapshot",
            "/nonexistent-dir/x.snap",
        ],
        1,
    );
    assert!(
        err.contains("--to-snapshot /nonexistent-dir/x.snap"),
        "{err}"
    );
    let _ = std::fs::remove_file(&snap);
}

#[test]
fn several_limits_are_simulated_and_replayed_together() {
    let out = ok(&[
        "simulate",
        "--limit",
        "10",
        "--also",
        "algorithm=fixed_window,limit=50,period=1m",
        "--duration",
        "30s",
    ]);
    golden("simulate_multi.txt", &out);
    assert!(out.contains("  and fixed_window, limit 50 per 1m"), "{out}");
    assert!(
        out.contains("most admitted in any 1m: 50 (limit 50, fixed_window)"),
        "{out}"
    );
    let out = ok(&[
        "replay",
        "trace.csv",
        "--limit",
        "5",
        "--also",
        "algorithm=fixed_window,limit=4,period=1m",
        "--decisions",
    ]);
    assert!(
        out.contains("denied, retry after")
            && out.contains("(by limit 2: fixed_window, limit 4 per 1m)"),
        "{out}"
    );
    assert!(
        out.contains("(by limit 1: gcra, limit 5 per 1s, burst 5)"),
        "{out}"
    );
}

#[test]
fn bad_further_limits_name_the_field() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["simulate", "--also", "algorithm=gcra,limit=0,period=1s"],
            "--also #1 (limit 2): field 'limit': 0 is outside",
        ),
        (
            &["simulate", "--also", "algorithm=gcra,limit=5"],
            "--also: field 'period' is missing",
        ),
        (
            &["simulate", "--also", "algorithm=warp,limit=5,period=1s"],
            "--also: field 'algorithm': \"warp\" is not one of",
        ),
        (
            &[
                "replay",
                "trace.csv",
                "--also",
                "algorithm=gcra,limit=5,period=soon",
            ],
            "--also: field 'period': \"soon\" is not a duration",
        ),
        (
            &[
                "simulate",
                "--also",
                "algorithm=fixed_window,limit=5,period=1s,burst=3",
            ],
            "--also #1 (limit 2): field 'burst'",
        ),
        (
            &[
                "simulate",
                "--also",
                "algorithm=gcra,limit=5,period=1s,sub-windows=2",
            ],
            "field 'sub-windows': applies only to bucketed_window",
        ),
        (
            &["simulate", "--also", "fixed_window:5/1s"],
            "--also: \"fixed_window:5/1s\" is not field=value",
        ),
    ];
    for (args, says) in cases {
        let err = fails(args, 2);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let spec = "algorithm=gcra,limit=5,period=1s";
    let mut eight = vec!["simulate"];
    for _ in 0..8 {
        eight.extend(["--also", spec]);
    }
    let err = fails(&eight, 2);
    assert!(err.contains("--also: 8 given; at most 7"), "{err}");
}

/// The counts of `key`'s row in a replay's per-key table: requests,
/// admitted, denied.
fn key_row(out: &str, key: &str) -> Vec<String> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&key))
        .map(|w| w[1..4].iter().map(|s| (*s).to_string()).collect())
        .unwrap_or_else(|| panic!("no row for {key}: {out}"))
}

#[test]
fn replay_holds_each_key_to_the_tier_its_line_names() {
    let tier = ["--tier", "algorithm=fixed_window,limit=5,period=1m"];
    let base = ["replay", "tiers.csv", "--algorithm", "fixed_window"];
    let args: Vec<&str> = [
        &base[..],
        &["--limit", "2", "--period", "1m"],
        &tier,
        &["--decisions"],
    ]
    .concat();
    let out = ok(&args);
    assert!(out.contains("  tier 1: "), "{out}");
    assert!(out.contains("paid cost 1 tier 1 at"), "{out}");
    // free: 2 of its tier-0 limit of 2; paid: 5 of 5; mover spent 3 as
    // tier 1, so as tier 0 (limit 2) it has nothing left.
    assert_eq!(key_row(&out, "free"), ["3", "2", "1"]);
    assert_eq!(key_row(&out, "paid"), ["6", "5", "1"]);
    assert_eq!(key_row(&out, "mover"), ["2", "1", "1"]);

    // Without --tier, a line naming tier 1 is an error naming the field.
    let err = fails(
        &[&base[..], &["--limit", "2", "--period", "1m"]].concat(),
        2,
    );
    assert!(
        err.contains("tiers.csv:5: field 'tier'") && err.contains("--tier"),
        "{err}"
    );
    // A tier that may not differ from tier 0 is refused by name.
    let err = fails(
        &[&base[..], &["--tier", "algorithm=gcra,limit=5,period=1m"]].concat(),
        2,
    );
    assert!(err.contains("--tier") && err.contains("algorithm"), "{err}");
    let err = fails(
        &[
            &base[..],
            &tier,
            &["--also", "algorithm=gcra,limit=5,period=1s"],
        ]
        .concat(),
        2,
    );
    assert!(err.contains("--tier") && err.contains("--also"), "{err}");
}

#[test]
fn replay_carries_tiers_over_a_snapshot() {
    // A generated trace whose lines name tier 0 or 1 by key.
    let lines: Vec<String> = generated_trace(600)
        .into_iter()
        .map(|l| {
            let tier = u8::from(l.contains("user-1"));
            format!("{l},{tier}")
        })
        .collect();
    let whole = temp_path("tiers-whole.csv");
    let first = temp_path("tiers-first.csv");
    let second = temp_path("tiers-second.csv");
    let snap = temp_path("tiers.snap");
    std::fs::write(&whole, lines.join("\n")).unwrap();
    std::fs::write(&first, lines[..300].join("\n")).unwrap();
    std::fs::write(&second, lines[300..].join("\n")).unwrap();
    let (snap_s, tier) = (snap.to_str().unwrap(), "algorithm=gcra,limit=20,period=1s");
    let run = |file: &Path, extra: &[&str]| {
        let mut args = vec![file.to_str().unwrap(), "--decisions", "--limit", "6"];
        args.extend_from_slice(&["--period", "1s", "--tier", tier]);
        args.extend_from_slice(extra);
        ok(&[&["replay"], &args[..]].concat())
    };
    let all = decisions(&run(&whole, &[]));
    let out = run(&first, &["--to-snapshot", snap_s]);
    assert!(out.contains("saved to the snapshot"), "{out}");
    assert_eq!(decisions(&out)[..], all[..300]);
    let out = run(&second, &["--from-snapshot", snap_s]);
    assert!(out.contains("started from the snapshot"), "{out}");
    assert_eq!(
        decisions(&out)[..],
        all[300..],
        "the rest after the restart"
    );
    assert!(all[300..].iter().any(|d| d.contains("denied")));
    assert_ne!(decisions(&run(&second, &[]))[..], all[300..]);

    // The tiers must be the saved ones; each mismatch names its option.
    let cases: &[(&[&str], &str)] = &[
        (&[], "a limiter of 2 tiers; give them with --tier"),
        (
            &["--tier", tier, "--tier", tier],
            "holds 2 tiers, the options give 3",
        ),
        (
            &["--tier", "algorithm=gcra,limit=21,period=1s"],
            "saved with --tier #1 field 'limit' 20, the options give 21",
        ),
    ];
    for (tiers, says) in cases {
        let mut args = vec![
            "replay",
            second.to_str().unwrap(),
            "--from-snapshot",
            snap_s,
        ];
        args.extend_from_slice(&["--limit", "6", "--period", "1s"]);
        args.extend_from_slice(tiers);
        let err = fails(&args, 2);
        assert!(err.contains(says), "{tiers:?}: {err}");
    }
    // A snapshot without tiers, restored with them.
    let plain = temp_path("tiers-plain.csv");
    std::fs::write(&plain, generated_trace(10).join("\n")).unwrap();
    ok(&[
        "replay",
        plain.to_str().unwrap(),
        "--limit",
        "6",
        "--period",
        "1s",
        "--to-snapshot",
        snap_s,
    ]);
    let err = fails(
        &[
            "replay",
            second.to_str().unwrap(),
            "--limit",
            "6",
            "--period",
            "1s",
            "--tier",
            tier,
            "--from-snapshot",
            snap_s,
        ],
        2,
    );
    assert!(
        err.contains("a limiter without tiers; drop --tier"),
        "{err}"
    );
    for path in [&whole, &first, &second, &plain, &snap] {
        let _ = std::fs::remove_file(path);
    }
}
