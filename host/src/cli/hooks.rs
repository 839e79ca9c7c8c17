//! `wt hooks …`: list, check and install hook plugins.

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// List built-in hooks and plugins with their status.
    List,
}

pub fn run(cmd: HooksCommand) -> anyhow::Result<u8> {
    match cmd {
        HooksCommand::List => Ok(crate::exit::SUCCESS),
    }
}
