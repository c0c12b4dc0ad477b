//! The `ratecell` command: see what the limiters do and pick one for your
//! own traffic. This file owns dispatch, the top-level help and how errors
//! end the process; each command lives in its own module, on the shared
//! experiment driver in `engine`.
//!
//! Exit codes: 0 success, 2 bad options or a bad input line, 1 anything
//! else (a file that cannot be read or written).

mod args;
mod compare;
mod demo;
mod engine;
mod load;
mod plot;
mod replay;
mod simulate;
mod table;

use args::CliError;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

const HELP: &str =
    "ratecell: lock-free in-process rate limiting, seven algorithms, one table per key

usage: ratecell [COMMAND] [options]

commands:
  demo       the classic experiment for all seven algorithms, simulated, then checked on the
             real clock (the default with no command)
  compare    the algorithms measured side by side: state per key, bursts, smoothness, distance
             from the exact sliding log; checks a well-known comparison table against them
  simulate   one policy under a load of a chosen shape; summary, rates over time, SVG plot
  replay     a CSV trace or web access log through one policy; per-key admitted and denied

Run `ratecell COMMAND --help` for a command's options.
";

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let result = run(&argv, &mut out).and_then(|()| out.flush().map_err(CliError::from));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = out.flush();
            if e.code == 0 {
                return ExitCode::SUCCESS;
            }
            eprintln!("ratecell: {}", e.message);
            if let Some(command) = e.help_for {
                eprintln!("(run `ratecell {command} --help` for the options)");
            }
            ExitCode::from(e.code)
        }
    }
}

fn run(argv: &[String], out: &mut dyn Write) -> Result<(), CliError> {
    let Some(first) = argv.first() else {
        return demo::run(&[], out);
    };
    let rest = &argv[1..];
    match first.as_str() {
        "demo" => demo::run(rest, out),
        "compare" => compare::run(rest, out),
        "simulate" => simulate::run(rest, out),
        "replay" => replay::run(rest, out),
        "help" | "-h" | "--help" => match rest.first().map(String::as_str) {
            None => Ok(write!(out, "{HELP}")?),
            Some(command) => run(&[command.to_string(), "--help".to_string()], out),
        },
        "-V" | "--version" => Ok(writeln!(out, "ratecell {}", env!("CARGO_PKG_VERSION"))?),
        // Options with no command are the default command's.
        option if option.starts_with('-') => demo::run(argv, out),
        other => Err(CliError::usage(format!(
            "unknown command {other:?}; the commands are demo, compare, simulate and replay \
             (see `ratecell --help`)"
        ))),
    }
}
