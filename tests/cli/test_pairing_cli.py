"""`botd pairing list|approve|revoke` from an admin's shell without the daemon's secrets."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from botd.chat import InboundMessage, Target
from botd.cli.pairing import format_age
from botd.inbound.access import AccessPolicy
from botd.inbound.router import Router
from botd.ops.statelock import StateLock
from botd.store import Store
from botd.store.pairing import PairingFile
from botd.store.postgres.schema import MIGRATIONS, SCHEMA_VERSION, migrate, schema_version
from tests.support.daemon_process import bare_env, run_botd

ROOT = Path(__file__).resolve().parents[2]


def botd(*args: str) -> subprocess.CompletedProcess[str]:
    # No TELEGRAM_TOKEN, no ANTHROPIC_API_KEY: the admin's shell lacks the EnvironmentFile.
    return run_botd("pairing", *args, cwd=ROOT, env=bare_env())


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "botd.yaml"
    path.write_text(
        f"state_dir: {tmp_path / 'state'}\n"
        "model:\n  provider: anthropic\n  api_key: ${ANTHROPIC_API_KEY}\n"
        "channels:\n  telegram:\n    token: ${TELEGRAM_TOKEN}\n",
        encoding="utf-8",
    )
    return path


def dm(sender: str, name: str) -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        chat_id=sender,
        sender_id=sender,
        sender_name=name,
        text="hello",
        message_id=f"{sender}-1",
        conversation_key=f"telegram:{sender}",
        is_direct=True,
    )


async def ask(store: Store, book: PairingFile, sender: str, name: str) -> str:
    sent: list[str] = []

    async def submit(_message: InboundMessage) -> None:
        raise AssertionError("an unknown sender reached the session")

    async def reply(_target: Target, text: str) -> None:
        sent.append(text)

    router = Router(store, submit, reply, {"telegram": AccessPolicy()}, pairing=book)
    assert not (await router.handle(dm(sender, name))).accepted
    return sent[-1].split("pairing code ")[1].split()[0]


async def test_list_approve_revoke_without_the_secrets(
    tmp_path: Path, config: Path, store: Store
) -> None:
    book = PairingFile(tmp_path / "state" / "pairing.json")
    code = await ask(store, book, "4242", "Frank Zappa")

    listed = botd("list", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    state, line = listed.stdout.splitlines()
    assert state == f"state dir {tmp_path / 'state'}"
    assert line.startswith(f"{code}  telegram  4242  Frank Zappa  ")
    assert line.endswith("s ago")

    as_json = json.loads(botd("list", "--json", "--config", str(config)).stdout)
    assert as_json["state_dir"] == str(tmp_path / "state")
    (pending,) = as_json["pending"]
    assert pending["code"] == code and pending["channel"] == "telegram"
    assert pending["sender"] == "4242" and pending["name"] == "Frank Zappa"
    assert 0 <= pending["age_seconds"] < 600
    assert as_json["approved"] == []

    typo = botd("approve", "telgram", code, "--config", str(config))
    assert typo.returncode == 2
    assert typo.stderr.strip() == "unknown channel 'telgram'; configured: telegram"
    wrong = botd("approve", "telegram", "NOPE2345", "--config", str(config))
    assert wrong.returncode == 1 and "no pending code 'NOPE2345' on telegram" in wrong.stderr

    approved = botd("approve", "telegram", code.lower(), "--config", str(config))
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout == f"approved 4242 on telegram (state dir {tmp_path / 'state'})\n"
    assert book.is_approved("telegram", "4242")  # the running daemon sees it
    after = botd("list", "--config", str(config)).stdout.splitlines()
    assert after[1:] == ["no pairing codes waiting", "approved  telegram  4242  Frank Zappa"]

    revoked = botd("revoke", "telegram", "4242", "--state-dir", str(tmp_path / "state"))
    assert revoked.returncode == 0
    assert revoked.stdout == f"revoked 4242 on telegram (state dir {tmp_path / 'state'})\n"
    assert not book.is_approved("telegram", "4242")
    again = botd("revoke", "telegram", "4242", "--config", str(config))
    assert again.returncode == 1 and "4242 is not approved on telegram" in again.stderr


def test_state_dir_needs_no_config_and_an_empty_state_lists_nothing(tmp_path: Path) -> None:
    listed = botd("list", "--state-dir", str(tmp_path))
    assert listed.returncode == 0
    assert listed.stdout == f"state dir {tmp_path}\nno pairing codes waiting\n"
    empty = json.loads(botd("list", "--json", "--state-dir", str(tmp_path)).stdout)
    assert empty == {"state_dir": str(tmp_path), "pending": [], "approved": []}


def test_an_unset_variable_in_state_dir_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text("state_dir: ${BOTD_STATE}\n", encoding="utf-8")
    result = botd("list", "--config", str(path))
    assert result.returncode == 2
    assert "state_dir: environment variable BOTD_STATE is not set" in result.stderr


def test_a_config_error_other_than_unset_secrets_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text("channels:\n  telegram:\n    tokn: ${TELEGRAM_TOKEN}\n", encoding="utf-8")
    result = botd("list", "--config", str(path))
    assert result.returncode == 2
    assert "unknown key 'tokn'" in result.stderr


async def test_a_file_from_before_names_were_kept_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "pairing.json"
    now = time.time()
    path.write_text(
        json.dumps(
            {"approved": [["slack", "U1"]], "pending": {"ABCDEFGH": ["telegram", "7", now]}}
        ),
        encoding="utf-8",
    )
    book = PairingFile(path)
    (waiting,) = await book.waiting()
    assert (waiting.code, waiting.channel, waiting.sender, waiting.name) == (
        "ABCDEFGH",
        "telegram",
        "7",
        None,
    )
    assert await book.approved() == [("slack", "U1", None)]
    listed = botd("list", "--state-dir", str(tmp_path)).stdout.splitlines()
    assert listed[1].startswith("ABCDEFGH  telegram  7  -  ")
    assert listed[2] == "approved  slack  U1  -"
    # Approving it writes the new format, which the old readers' fields still lead.
    assert await book.approve("telegram", "ABCDEFGH") == "7"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["approved"] == [["slack", "U1"], ["telegram", "7"]]


async def test_a_hostile_name_is_shown_escaped(tmp_path: Path, store: Store) -> None:
    book = PairingFile(tmp_path / "pairing.json")
    await ask(store, book, "666", "Evil\x1b[2J\nName")
    listed = botd("list", "--state-dir", str(tmp_path))
    (_, line) = listed.stdout.splitlines()
    assert "\x1b" not in listed.stdout
    assert "Evil\\x1b[2J\\nName" in line


async def test_the_name_is_kept_when_the_code_is_issued_and_reissue_keeps_it(
    tmp_path: Path,
) -> None:
    book = PairingFile(tmp_path / "pairing.json")
    code, issued = await book.issue("telegram", "1", "Ann")
    assert issued
    assert await book.issue("telegram", "1", "Someone Else") == (code, False)
    assert (await PairingFile(tmp_path / "pairing.json").waiting())[0].name == "Ann"


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0, "0s"), (59.9, "59s"), (60, "1m"), (3599, "59m"), (3725, "1h02m")]
)
def test_ages_read_at_a_glance(seconds: float, shown: str) -> None:
    assert format_age(seconds) == shown


@pytest.mark.parametrize("text", ["{not json", '{"pending": {"X": ["telegram"]}}', "[1, 2]"])
def test_a_damaged_pairing_file_is_one_error_line(tmp_path: Path, text: str) -> None:
    (tmp_path / "pairing.json").write_text(text, encoding="utf-8")
    result = botd("list", "--state-dir", str(tmp_path))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"botd: {tmp_path / 'pairing.json'} cannot be read (")
    assert line.endswith("fix or remove it")


async def test_approve_into_a_state_dir_that_cannot_be_written_is_one_error_line(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    book = PairingFile(state / "pairing.json")
    code, _ = await book.issue("telegram", "1", "Ann")
    (state / "pairing.tmp").mkdir()  # the new file cannot be written, whoever runs this
    result = botd("approve", "telegram", code, "--state-dir", str(state))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"botd: cannot update {state / 'pairing.json'}: ")
    assert await book.pending() == [(code, "telegram", "1")]  # nothing half-written


async def test_a_relative_state_dir_is_read_next_to_the_config_from_anywhere(
    tmp_path: Path,
) -> None:
    # /srv/bot/botd.yaml with state_dir: ./var, run from another directory: the daemon's
    # ./var is /srv/bot/var, and that is what pairing reads and names.
    bot = tmp_path / "srv" / "bot"
    bot.mkdir(parents=True)
    config = bot / "botd.yaml"
    config.write_text(
        "state_dir: ./var\nchannels:\n  telegram:\n    token: ${TELEGRAM_TOKEN}\n",
        encoding="utf-8",
    )
    book = PairingFile(bot / "var" / "pairing.json")
    code, _ = await book.issue("telegram", "4242", "Frank")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "var").mkdir(parents=True)  # a ./var where the command runs: not this one
    listed = run_botd("pairing", "list", "--config", str(config), cwd=elsewhere, env=bare_env())
    assert listed.returncode == 0, listed.stderr
    state, line = listed.stdout.splitlines()
    assert state == f"state dir {bot / 'var'}"
    assert line.startswith(f"{code}  telegram  4242  Frank  ")
    approved = run_botd(
        "pairing",
        "approve",
        "telegram",
        code,
        "--config",
        str(config),
        cwd=elsewhere,
        env=bare_env(),
    )
    assert approved.returncode == 0, approved.stderr
    assert book.is_approved("telegram", "4242")
    assert not (elsewhere / "var" / "pairing.json").exists()


@pytest.mark.parametrize("how", ["--state-dir", "--config"])
def test_a_state_dir_that_does_not_exist_is_an_error_naming_it(tmp_path: Path, how: str) -> None:
    missing = tmp_path / "nonexistent"
    if how == "--state-dir":
        where = ["--state-dir", str(missing)]
    else:
        config = tmp_path / "botd.yaml"
        config.write_text("state_dir: ./nonexistent\n", encoding="utf-8")
        where = ["--config", str(config)]
    for action in (["list"], ["list", "--json"], ["approve", "telegram", "ABCD2345"]):
        result = botd(*action, *where)
        assert result.returncode == 2, result
        assert result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"botd: state dir {missing} (")
        assert "does not exist" in line
    assert not missing.exists()  # not created by asking


def test_a_state_dir_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("oops", encoding="utf-8")
    result = botd("list", "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2
    assert "is not a directory" in result.stderr


async def test_on_postgres_the_admin_approves_in_the_database_every_node_reads(
    tmp_path: Path, postgres_dsn: str
) -> None:
    from botd.store.postgres import PostgresStore

    config = tmp_path / "botd.yaml"
    config.write_text(
        "channels:\n  telegram:\n    token: ${TELEGRAM_TOKEN}\n"
        "store:\n  backend: postgres\n  dsn: ${BOTD_DATABASE_URL}\n",
        encoding="utf-8",
    )
    store = await PostgresStore.open(postgres_dsn)
    try:
        node = store.pairing()
        code, _ = await node.issue("telegram", "4242", "Frank")
        env = {**bare_env(), "BOTD_DATABASE_URL": postgres_dsn}
        listed = run_botd("pairing", "list", "--config", str(config), env=env)
        assert listed.returncode == 0, listed.stderr
        where, line = listed.stdout.splitlines()
        assert where.startswith("database postgresql://") and "pairing.json" not in where
        assert line.startswith(f"{code}  telegram  4242  Frank  ")
        approved = run_botd(
            "pairing", "approve", "telegram", code, "--config", str(config), env=env
        )
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.startswith("approved 4242 on telegram (database postgresql://")
        await node.refresh()
        assert node.is_approved("telegram", "4242")
        assert not (tmp_path / "var").exists()  # nothing went to a state dir

        down = run_botd(
            "pairing", "list", "--config", str(config),
            env={**env, "BOTD_DATABASE_URL": "postgresql://botd:hunter2@127.0.0.1:1/x"},
        )  # fmt: skip
        assert down.returncode == 2
        (line,) = down.stderr.splitlines()
        assert "cannot be opened" in line and "hunter2" not in line
    finally:
        await store.aclose()


def postgres_config(tmp_path: Path) -> Path:
    path = tmp_path / "botd.yaml"
    path.write_text(
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
        "channels:\n  telegram:\n    token: ${TELEGRAM_TOKEN}\n"
        "store:\n  backend: postgres\n  dsn: ${BOTD_DATABASE_URL}\n",
        encoding="utf-8",
    )
    return path


async def test_on_postgres_the_command_never_migrates_the_database_the_nodes_share(
    tmp_path: Path, postgres_dsn: str
) -> None:
    # A node of the release before migrated it: a newer botd pairing must not migrate it.
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        assert await migrate(conn, "db", MIGRATIONS[:-1]) == SCHEMA_VERSION - 1
    config = postgres_config(tmp_path)
    env = {**bare_env(), "BOTD_DATABASE_URL": postgres_dsn}
    listed = run_botd("pairing", "list", "--config", str(config), env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1:] == ["no pairing codes waiting"]
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        assert await schema_version(conn) == SCHEMA_VERSION - 1


def test_on_postgres_a_database_no_node_started_on_is_one_line(
    tmp_path: Path, postgres_dsn: str
) -> None:
    # With a password (never checked), the database's name is no secret to mask.
    env = {**bare_env(), "BOTD_DATABASE_URL": postgres_dsn.replace("botd@", "botd:pw@")}
    done = run_botd("pairing", "list", "--config", str(postgres_config(tmp_path)), env=env)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("botd: postgresql://")
    assert line.endswith(
        ": no botd has started on it yet (it has no schema): start a node on it first"
    )


def test_on_postgres_an_unset_dsn_variable_is_said_in_one_line(tmp_path: Path) -> None:
    done = run_botd("pairing", "list", "--config", str(postgres_config(tmp_path)), env=bare_env())
    assert done.returncode == 2
    assert done.stderr == (
        "botd: store.dsn: ${BOTD_DATABASE_URL} is not set in this shell: pairing on PostgreSQL "
        "is kept in the database, so set it as botd's environment does\n"
    )


def test_the_state_dir_of_a_node_on_postgres_is_refused_naming_its_config(tmp_path: Path) -> None:
    config = postgres_config(tmp_path)
    with StateLock(tmp_path / "state", config=config):  # the node runs on that state dir
        done = botd("approve", "telegram", "K7QX2MPA", "--state-dir", str(tmp_path / "state"))
    assert done.returncode == 2
    assert done.stderr == (
        f"botd: the botd on state dir {tmp_path / 'state'} keeps pairing in its database "
        f"(store.backend: postgres), not in pairing.json: use --config {config}\n"
    )
    assert not (tmp_path / "state" / "pairing.json").exists()


async def test_a_code_is_approved_on_the_channel_instance_it_was_given_on(
    tmp_path: Path, store: Store
) -> None:
    """Two Telegram bots: a code given by the second (``support``) names it, and approving
    it there lets the sender in on that bot only."""
    path = tmp_path / "botd.yaml"
    path.write_text(
        f"state_dir: {tmp_path / 'state'}\n"
        "channels:\n  telegram:\n    token: ${TELEGRAM_TOKEN}\n"
        "  support:\n    platform: telegram\n    token: ${SUPPORT_TOKEN}\n",
        encoding="utf-8",
    )
    book = PairingFile(tmp_path / "state" / "pairing.json")
    told: list[str] = []

    async def submit(_message: InboundMessage) -> None:
        raise AssertionError("an unknown sender reached the session")

    async def reply(_target: Target, text: str) -> None:
        told.append(text)

    policies = {"telegram": AccessPolicy(), "support": AccessPolicy()}
    router = Router(store, submit, reply, policies, pairing=book)
    asked = replace(dm("4242", "Frank Zappa"), channel="support", conversation_key="support:4242")
    assert not (await router.handle(asked)).accepted
    [offer] = told
    code = offer.split("pairing code ")[1].split()[0]
    assert f"botd pairing approve support {code}" in offer

    approved = botd("approve", "support", code, "--config", str(path))
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout == f"approved 4242 on support (state dir {tmp_path / 'state'})\n"
    assert book.is_approved("support", "4242")
    assert not book.is_approved("telegram", "4242")
