"""The chat-command parser the router and the sessions share."""

from __future__ import annotations

from botd.commands import COMMANDS, chat_command, menu


def test_commands_are_recognized_with_or_without_a_bot_name() -> None:
    assert chat_command("/stop") == "/stop"
    assert chat_command("  /STATUS please") == "/status"
    assert chat_command("/new@my_bot") == "/new"
    assert all(chat_command(command) == command for command in COMMANDS)


def test_other_text_is_not_a_command() -> None:
    assert chat_command("") is None
    assert chat_command("stop") is None
    assert chat_command("/stopper") is None
    assert chat_command("please /stop") is None


def test_pair_is_in_the_menu_only_where_owners_approve_pairing_codes() -> None:
    assert "/pair" not in dict(menu())
    assert dict(menu(pairing_by_owners=True))["/pair"].startswith("Owners:")
    assert chat_command("/pair ABCD2345") == "/pair"
