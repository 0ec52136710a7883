//! kubectl plugin: `kubectl laneway explain LANE [-s SERVICE] [-n NAMESPACE] [-f FILE]...` and
//! `kubectl laneway dashboard [-n NAMESPACE] [--listen ADDRESS]` and
//! `kubectl laneway probe LANE --entry ENTRY [--path PATH] [--gateway URL] [--expect A,B] [-n NAMESPACE]`.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "kubectl laneway", version)]
enum Plugin {
    /// Which pods serve a lane (or one service in it), where they come from and why.
    Explain(laneway::explain::ExplainArgs),
    /// A read-only page of the lanes × services, served on localhost with your credentials.
    Dashboard(laneway::dashboard::DashboardArgs),
    /// Sends a request into a lane and names the first hop that lost it (exit 1 then).
    Probe(laneway::probe::ProbeArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Plugin::parse() {
        Plugin::Explain(args) => print!("{}", laneway::explain::run(&args).await?),
        Plugin::Dashboard(args) => laneway::dashboard::run(&args).await?,
        Plugin::Probe(args) => {
            let (text, clean) = laneway::probe::run(&args).await?;
            print!("{text}");
            if !clean {
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
