//! The `ratecell` command: see what the limiters do and pick one for your
//! own traffic. This file owns the command line (clap), dispatch, and how
//! errors end the process; each command lives in its own module, on the
//! shared experiment driver in `engine`.
//!
//! Exit codes: 0 success, 2 bad options or a bad input line, 1 anything
//! else (a file that cannot be read or written).

mod args;
mod compare;
mod demo;
mod engine;
mod load;
mod plot;
mod progress;
mod replay;
mod simulate;
mod table;

use args::CliError;
use clap::{CommandFactory, Parser, Subcommand};
use std::io::{BufWriter, Write};
use std::process::ExitCode;

/// Every command's help has the same shape: usage, what it does, options.
pub const HELP_TEMPLATE: &str = "usage: {usage}\n\n{about-with-newline}\n{all-args}{after-help}";

/// ratecell: lock-free in-process rate limiting, seven algorithms, one table per key
#[derive(Parser, Debug)]
#[command(
    name = "ratecell",
    version,
    help_template = HELP_TEMPLATE,
    max_term_width = 100,
    args_conflicts_with_subcommands = true,
    args_override_self = true,
    after_help = "With no command, or only the demo's options, runs the demo.\n\
                  Run `ratecell COMMAND --help` for a command's options."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Commands>,
    /// Options with no command are the demo's.
    #[command(flatten)]
    demo: demo::DemoArgs,
}

#[derive(Subcommand, Debug)]
enum Commands {
    /// The classic experiment for all seven algorithms, simulated, then checked on the real clock
    /// (the default with no command)
    #[command(long_about = demo::ABOUT)]
    Demo(demo::DemoArgs),
    /// The algorithms measured side by side: state per key, bursts, smoothness, distance from the
    /// exact sliding log; checks a well-known comparison table against them
    #[command(long_about = compare::ABOUT)]
    Compare(compare::CompareArgs),
    /// One policy under a load of a chosen shape: summary, rates over time, SVG or PNG plot
    #[command(long_about = simulate::ABOUT, after_help = simulate::AFTER)]
    Simulate(simulate::SimulateArgs),
    /// A CSV trace or web access log through one policy: per-key admitted and denied
    #[command(long_about = replay::ABOUT, after_help = replay::AFTER)]
    Replay(replay::ReplayArgs),
    /// Writes a shell completion script to standard output
    #[command(after_help = COMPLETIONS_AFTER)]
    Completions(CompletionsArgs),
}

const COMPLETIONS_AFTER: &str = "examples:
  ratecell completions bash > ~/.local/share/bash-completion/completions/ratecell
  ratecell completions zsh > ~/.zfunc/_ratecell
  ratecell completions fish > ~/.config/fish/completions/ratecell.fish";

// The options of `completions`.
#[derive(clap::Args, Debug)]
#[command(help_template = HELP_TEMPLATE, args_override_self = true)]
struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_name = "SHELL", ignore_case = true)]
    shell: clap_complete::Shell,
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
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

fn run(argv: &[std::ffi::OsString], out: &mut dyn Write) -> Result<(), CliError> {
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                write!(out, "{}", e.render())?;
                return Ok(());
            }
            // The command being parsed, for the pointer to its help.
            let command = argv
                .get(1)
                .and_then(|a| a.to_str())
                .filter(|a| args::COMMANDS.contains(a));
            return Err(args::from_clap(&e, command));
        }
    };
    match cli.command {
        None => demo::run(&cli.demo, out),
        Some(Commands::Demo(a)) => demo::run(&a, out),
        Some(Commands::Compare(a)) => compare::run(&a, out),
        Some(Commands::Simulate(a)) => simulate::run(&a, out),
        Some(Commands::Replay(a)) => replay::run(&a, out),
        Some(Commands::Completions(a)) => {
            let mut command = Cli::command();
            clap_complete::generate(a.shell, &mut command, "ratecell", out);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
