"""A node on PostgreSQL whose database refuses to take messages, tried from outside.

One ``botd run`` (cluster mode) polling the fake Telegram. The database refuses every new
inbox row as a full disk does (a trigger raising SQLSTATE 53100, ``disk_full``, as the server
says "could not extend file"). Two users write: the first message cannot be taken, and the
second, which comes after it, is held back to keep the order (Telegram hands both again).
Each sender is told once that the message could not be taken, however often Telegram hands
it over; once the database takes writes again, both are answered, once each.
"""

from __future__ import annotations

from pathlib import Path

from botd.inbound.router import STORE_FAILED_NOTICE
from tests.cluster.harness import MODEL_KEY, TOKEN, Cluster
from tests.fakes.anthropic_api import FakeAnthropicAPI, answers_by_prompt
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import until

FIRST, SECOND = 701, 702
"""The two users' DMs."""

REFUSE = """
CREATE FUNCTION refuse_inbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full';
END $$;
CREATE TRIGGER refuse_inbox BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION refuse_inbox();
"""
TAKE = "DROP TRIGGER refuse_inbox ON inbox; DROP FUNCTION refuse_inbox();"


async def test_two_users_writing_while_the_database_refuses_are_each_told_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(tmp_path, postgres_dsn, model, telegram=telegram, size=1) as cluster,
    ):
        [node] = cluster.nodes

        def told() -> list[str]:
            return telegram.visible(FIRST) + telegram.visible(SECOND)

        try:
            await cluster.start(node)
            await cluster.ready("telegram")
            await cluster.lease_holder("telegram:")  # polling
            await cluster.execute(REFUSE)
            telegram.push_text(FIRST, "first, while the database refuses")
            telegram.push_text(SECOND, "second, while the database refuses")
            await until(lambda: told() == [STORE_FAILED_NOTICE] * 2, "both senders told")
            # Telegram hands both over again (botd backs off) while writes still fail.
            polls = len(telegram.calls_to("getUpdates"))
            await until(lambda: len(telegram.calls_to("getUpdates")) >= polls + 2, "two polls")
            assert told() == [STORE_FAILED_NOTICE] * 2

            # Each answer named by its prompt: the two conversations run side by side, so
            # which asks the model first is not given.
            model.responder = answers_by_prompt({"first,": "One.", "second,": "Two."})
            await cluster.execute(TAKE)
            await until(lambda: len(told()) == 4, "both answered")
            statuses = await cluster.stop_all()
        except BaseException:
            print(cluster.logs())
            raise

    assert statuses == {node.name: 0}
    assert telegram.visible(FIRST) == [STORE_FAILED_NOTICE, "One."]
    assert telegram.visible(SECOND) == [STORE_FAILED_NOTICE, "Two."]
    assert len(model.requests) == 2
