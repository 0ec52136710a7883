//! kubectl plugin: `kubectl laneway explain LANE [-s SERVICE] [-n NAMESPACE] [-f FILE]...`.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "kubectl laneway", version)]
enum Plugin {
    /// Which pods serve a lane (or one service in it), where they come from and why.
    Explain(laneway::explain::ExplainArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Plugin::Explain(args) = Plugin::parse();
    print!("{}", laneway::explain::run(&args).await?);
    Ok(())
}
