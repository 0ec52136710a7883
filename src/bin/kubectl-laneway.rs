//! kubectl plugin: `kubectl laneway explain LANE [-s SERVICE] [-n NAMESPACE] [-f FILE]...` and
//! `kubectl laneway dashboard [-n NAMESPACE] [--listen ADDRESS]`.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "kubectl laneway", version)]
enum Plugin {
    /// Which pods serve a lane (or one service in it), where they come from and why.
    Explain(laneway::explain::ExplainArgs),
    /// A read-only page of the lanes × services, served on localhost with your credentials.
    Dashboard(laneway::dashboard::DashboardArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Plugin::parse() {
        Plugin::Explain(args) => print!("{}", laneway::explain::run(&args).await?),
        Plugin::Dashboard(args) => laneway::dashboard::run(&args).await?,
    }
    Ok(())
}
