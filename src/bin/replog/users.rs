//! `replog users`: SCRAM users, as Kafka's `kafka-configs --entity-type users` manages their
//! credentials: `--create NAME --mechanism M --password-file FILE|-` (the password is salted
//! here; only the salted password travels), `--delete NAME [--mechanism M]`, `--list`.

use std::io::Read;

use replog::ScramMechanism;

use crate::connect::connect;
use crate::error::CliError;

/// The arguments of `replog users`.
#[derive(Debug, clap::Args)]
pub(crate) struct UsersArgs {
    /// Brokers to bootstrap from, comma-separated HOST:PORT.
    #[arg(long)]
    bootstrap_server: String,
    /// Give this user a credential (creating it, or replacing its credential for the
    /// mechanism).
    #[arg(long, conflicts_with_all = ["delete", "list"], requires = "password_file")]
    create: Option<String>,
    /// Remove this user's credential for --mechanism, or all of them.
    #[arg(long, conflicts_with = "list")]
    delete: Option<String>,
    /// List the users and their mechanisms.
    #[arg(long)]
    list: bool,
    /// SCRAM-SHA-512 (the default for --create) or SCRAM-SHA-256.
    #[arg(long, value_parser = parse_mechanism)]
    mechanism: Option<ScramMechanism>,
    /// With --create: the file holding the password (its first line), or `-` for standard
    /// input; never on the command line, where `ps` shows it.
    #[arg(long)]
    password_file: Option<String>,
    /// With --create: PBKDF2's iteration count (4,096 to 16,384).
    #[arg(long, default_value_t = 8192)]
    iterations: u32,
}

fn parse_mechanism(name: &str) -> Result<ScramMechanism, String> {
    ScramMechanism::from_name(name)
        .ok_or_else(|| format!("{name:?}: SCRAM-SHA-256 or SCRAM-SHA-512"))
}

/// The password: the first line of the file, or of standard input for `-`.
fn read_password(source: &str) -> Result<String, CliError> {
    let mut text = String::new();
    if source == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(CliError::Stdin)?;
    } else {
        text = std::fs::read_to_string(source).map_err(|e| CliError::Io {
            path: source.into(),
            source: e,
        })?;
    }
    let password = text.lines().next().unwrap_or_default().to_string();
    if password.is_empty() {
        return Err(CliError::Usage("the password is empty"));
    }
    Ok(password)
}

/// Runs `replog users`.
pub(crate) async fn run(args: UsersArgs) -> Result<(), CliError> {
    if let Some(user) = &args.create {
        let password = read_password(args.password_file.as_deref().unwrap_or("-"))?;
        let client = connect(&args.bootstrap_server).await?;
        let mechanism = args.mechanism.unwrap_or(ScramMechanism::Sha512);
        client
            .set_user_password(user, mechanism, &password, args.iterations)
            .await?;
        println!("User {user}: {} credential set", mechanism.name());
        return Ok(());
    }
    let client = connect(&args.bootstrap_server).await?;
    if let Some(user) = &args.delete {
        client.delete_user(user, args.mechanism).await?;
        println!("User {user}: credentials removed");
        return Ok(());
    }
    if !args.list {
        return Err(CliError::Usage("one of --create, --delete or --list"));
    }
    for u in client.describe_users().await? {
        let mechanisms: Vec<String> = u
            .mechanisms
            .iter()
            .map(|(m, iterations)| format!("{}(iterations={iterations})", m.name()))
            .collect();
        println!("{}: {}", u.user, mechanisms.join(", "));
    }
    Ok(())
}
