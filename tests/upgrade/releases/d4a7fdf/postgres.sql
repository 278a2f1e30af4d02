--
-- PostgreSQL database dump
--

\restrict AADEZovachFfhowxH29o0LaNFoHbLWRexhbRerubzJ4JxFMli7S9Pv4iHz5v425

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: active_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.active_sessions (
    conversation_key text NOT NULL,
    session_id text NOT NULL
);


--
-- Name: approvals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approvals (
    key text NOT NULL,
    token text NOT NULL,
    session_id text NOT NULL,
    call_id text NOT NULL,
    tool_name text NOT NULL,
    summary text NOT NULL,
    deadline double precision NOT NULL,
    state text NOT NULL,
    decided_by text DEFAULT ''::text NOT NULL,
    messages text DEFAULT '[]'::text NOT NULL,
    created_at double precision NOT NULL,
    decided_at double precision
);


--
-- Name: budgets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budgets (
    name text NOT NULL,
    next_at double precision NOT NULL
);


--
-- Name: button_messages; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.button_messages (
    channel text NOT NULL,
    account text NOT NULL,
    chat_id text NOT NULL,
    message_id text NOT NULL,
    buttons text NOT NULL,
    posted_at double precision NOT NULL
);


--
-- Name: chat_marks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.chat_marks (
    channel text NOT NULL,
    account text NOT NULL,
    chat_id text NOT NULL,
    thread_id text NOT NULL,
    message_id text NOT NULL,
    marked_at double precision NOT NULL
);


--
-- Name: chatter; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.chatter (
    id bigint NOT NULL,
    conversation_key text NOT NULL,
    sender_id text NOT NULL,
    sender_name text NOT NULL,
    text text NOT NULL,
    kept_at double precision NOT NULL,
    attachments text DEFAULT ''::text NOT NULL
);


--
-- Name: chatter_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.chatter ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.chatter_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: conversation_models; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.conversation_models (
    conversation_key text NOT NULL,
    model text NOT NULL,
    updated_at double precision NOT NULL
);


--
-- Name: editor_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.editor_sessions (
    channel text NOT NULL,
    session_id text NOT NULL,
    cwd text NOT NULL,
    title text,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);


--
-- Name: imports; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.imports (
    name text NOT NULL,
    imported_at double precision NOT NULL,
    detail text
);


--
-- Name: inbound_seen; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.inbound_seen (
    channel text NOT NULL,
    message_id text NOT NULL,
    seen_at double precision NOT NULL
);


--
-- Name: inbox; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.inbox (
    id bigint NOT NULL,
    channel text NOT NULL,
    conversation_key text NOT NULL,
    seq bigint NOT NULL,
    message text NOT NULL,
    state text NOT NULL,
    run_id text,
    session_id text,
    user_turn_id bigint,
    attempts integer DEFAULT 0 NOT NULL,
    accepted_at double precision NOT NULL,
    updated_at double precision NOT NULL
);


--
-- Name: inbox_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.inbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.inbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: leases; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.leases (
    name text NOT NULL,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamp with time zone NOT NULL
);


--
-- Name: messages; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.messages (
    id bigint NOT NULL,
    session_id text NOT NULL,
    role text NOT NULL,
    body text NOT NULL,
    created_at double precision NOT NULL,
    compacted_at double precision
);


--
-- Name: messages_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.messages ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.messages_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: offsets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.offsets (
    channel text NOT NULL,
    account text NOT NULL,
    value text NOT NULL,
    updated_at double precision NOT NULL
);


--
-- Name: outbox; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.outbox (
    id bigint NOT NULL,
    anchor bigint,
    seq integer NOT NULL,
    kind text NOT NULL,
    target text NOT NULL,
    text text NOT NULL,
    state text NOT NULL,
    refs text,
    media text,
    epoch bigint,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    buttons text
);


--
-- Name: outbox_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: pairing_approved; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.pairing_approved (
    channel text NOT NULL,
    sender text NOT NULL,
    name text,
    approved_at double precision NOT NULL
);


--
-- Name: pairing_codes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.pairing_codes (
    code text NOT NULL,
    channel text NOT NULL,
    sender text NOT NULL,
    name text,
    issued_at double precision NOT NULL
);


--
-- Name: previews; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.previews (
    anchor bigint NOT NULL,
    refs text NOT NULL,
    streaming boolean DEFAULT false NOT NULL,
    updated_at double precision NOT NULL
);


--
-- Name: run_usage; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_usage (
    id bigint NOT NULL,
    conversation_key text NOT NULL,
    session_id text NOT NULL,
    run_id text NOT NULL,
    model text NOT NULL,
    input_tokens bigint DEFAULT 0 NOT NULL,
    output_tokens bigint DEFAULT 0 NOT NULL,
    cache_read_tokens bigint DEFAULT 0 NOT NULL,
    cache_write_tokens bigint DEFAULT 0 NOT NULL,
    created_at double precision NOT NULL
);


--
-- Name: run_usage_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.run_usage ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.run_usage_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: scheduler_jobs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.scheduler_jobs (
    id text NOT NULL,
    kind text NOT NULL,
    trigger text NOT NULL,
    name text NOT NULL,
    prompt text NOT NULL,
    target text NOT NULL,
    conversation_key text,
    source text,
    fingerprint text,
    next_run_time text,
    heartbeat integer,
    updated_at double precision NOT NULL
);


--
-- Name: scheduler_runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.scheduler_runs (
    id bigint NOT NULL,
    job_id text NOT NULL,
    at text NOT NULL,
    outcome text NOT NULL,
    error text
);


--
-- Name: scheduler_runs_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.scheduler_runs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.scheduler_runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: schema_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_version (
    version integer NOT NULL
);


--
-- Name: sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.sessions (
    session_id text NOT NULL,
    conversation_key text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    message_count integer DEFAULT 0 NOT NULL,
    runs integer DEFAULT 0 NOT NULL,
    summary text,
    meta text DEFAULT '{}'::text NOT NULL
);


--
-- Name: status_lines; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.status_lines (
    conversation_key text NOT NULL,
    kind text NOT NULL,
    message_id text NOT NULL,
    target text NOT NULL,
    created_at double precision NOT NULL
);


--
-- Data for Name: active_sessions; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.active_sessions VALUES ('telegram:777', '025e994214ff439e92f789420dc49050');


--
-- Data for Name: approvals; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: budgets; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.budgets VALUES ('telegram:123456', 1795984824.5595734);


--
-- Data for Name: button_messages; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: chat_marks; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: chatter; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: conversation_models; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: editor_sessions; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: imports; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: inbound_seen; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.inbound_seen VALUES ('telegram', '777:1', 1795984816.5696268);
INSERT INTO public.inbound_seen VALUES ('telegram', '777:3', 1795984820.4611301);
INSERT INTO public.inbound_seen VALUES ('telegram', '777:5', 1795984820.8632514);


--
-- Data for Name: inbox; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.inbox OVERRIDING SYSTEM VALUE VALUES (1, 'telegram', 'telegram:777', 1, '{"channel": "telegram", "chat_id": "777", "sender_id": "777", "text": "please remember the word kiwi", "message_id": "3", "conversation_key": "telegram:777", "account_id": "default", "thread_id": null, "sender_name": "Ada", "is_direct": true, "mentions_bot": false, "reply_to_message_id": null, "target": null, "dedupe_keys": ["777:3"], "bot_name": "botd_test_bot", "context": "", "album": null, "edited": false, "reactable": true, "heartbeat": null, "in_history": false}', 'answered', '025e994214ff439e92f789420dc49050:1', '025e994214ff439e92f789420dc49050', 1, 1, 1795984820.4611301, 1795984820.8467264);
INSERT INTO public.inbox OVERRIDING SYSTEM VALUE VALUES (2, 'telegram', 'telegram:777', 2, '{"channel": "telegram", "chat_id": "777", "sender_id": "777", "text": "tell me the long story", "message_id": "5", "conversation_key": "telegram:777", "account_id": "default", "thread_id": null, "sender_name": "Ada", "is_direct": true, "mentions_bot": false, "reply_to_message_id": null, "target": null, "dedupe_keys": ["777:5"], "bot_name": "botd_test_bot", "context": "", "album": null, "edited": false, "reactable": true, "heartbeat": null, "in_history": false}', 'running', '025e994214ff439e92f789420dc49050:2', '025e994214ff439e92f789420dc49050', 3, 1, 1795984820.8632514, 1795984821.3973932);


--
-- Data for Name: leases; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.leases VALUES ('node:node-a', 'node-a', 1, '2026-11-29 20:40:36.380802+00');
INSERT INTO public.leases VALUES ('scheduler', 'node-a', 1, '2026-11-29 20:40:36.38085+00');
INSERT INTO public.leases VALUES ('telegram:default', 'node-a', 1, '2026-11-29 20:40:36.380853+00');
INSERT INTO public.leases VALUES ('conversation:telegram:777', 'node-a', 1, '2026-11-29 20:40:36.380855+00');


--
-- Data for Name: messages; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.messages OVERRIDING SYSTEM VALUE VALUES (1, '025e994214ff439e92f789420dc49050', 'user', '{"role": "user", "content": [{"type": "text", "text": "please remember the word kiwi"}]}', 1795984820.8253145, NULL);
INSERT INTO public.messages OVERRIDING SYSTEM VALUE VALUES (2, '025e994214ff439e92f789420dc49050', 'assistant', '{"role": "assistant", "content": [{"type": "text", "text": "Noted: kiwi."}], "stop_reason": "end_turn", "usage": {"input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}, "model": "claude-test", "provider": "anthropic", "timestamp": 1795984820.8205535}', 1795984820.8245842, NULL);
INSERT INTO public.messages OVERRIDING SYSTEM VALUE VALUES (3, '025e994214ff439e92f789420dc49050', 'user', '{"role": "user", "content": [{"type": "text", "text": "tell me the long story"}]}', 1795984821.3973932, NULL);


--
-- Data for Name: offsets; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.offsets VALUES ('telegram', 'default', '4', 1795984820.8799963);


--
-- Data for Name: outbox; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.outbox OVERRIDING SYSTEM VALUE VALUES (1, 1, 1, 'block', '{"channel": "telegram", "chat_id": "777", "account_id": "default", "thread_id": null, "reply_to_id": null}', 'Noted: kiwi.', 'sent', '["4"]', NULL, 1, 1795984820.8208158, 1795984820.8464525, NULL);
INSERT INTO public.outbox OVERRIDING SYSTEM VALUE VALUES (2, 2, 1, 'block', '{"channel": "telegram", "chat_id": "777", "account_id": "default", "thread_id": null, "reply_to_id": null}', 'Paragraph 01 of the long answer.', 'sent', '["6"]', NULL, 1, 1795984822.7130759, 1795984822.7269394, NULL);
INSERT INTO public.outbox OVERRIDING SYSTEM VALUE VALUES (3, 2, 2, 'block', '{"channel": "telegram", "chat_id": "777", "account_id": "default", "thread_id": null, "reply_to_id": null}', 'Paragraph 02 of the long answer.', 'sent', '["7"]', NULL, 1, 1795984823.313836, 1795984823.3382564, NULL);
INSERT INTO public.outbox OVERRIDING SYSTEM VALUE VALUES (4, 2, 3, 'block', '{"channel": "telegram", "chat_id": "777", "account_id": "default", "thread_id": null, "reply_to_id": null}', 'Paragraph 03 of the long answer.', 'sent', '["8"]', NULL, 1, 1795984823.914329, 1795984824.6044245, NULL);
INSERT INTO public.outbox OVERRIDING SYSTEM VALUE VALUES (5, 2, 4, 'block', '{"channel": "telegram", "chat_id": "777", "account_id": "default", "thread_id": null, "reply_to_id": null}', 'Paragraph 04 of the long answer.', 'pending', NULL, NULL, 1, 1795984824.6044967, 1795984824.6044967, NULL);


--
-- Data for Name: pairing_approved; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.pairing_approved VALUES ('telegram', '777', 'Ada', 1795984819.7797446);


--
-- Data for Name: pairing_codes; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: previews; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: run_usage; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.run_usage OVERRIDING SYSTEM VALUE VALUES (1, 'telegram:777', '025e994214ff439e92f789420dc49050', '025e994214ff439e92f789420dc49050:1', 'claude-test', 12, 7, 0, 0, 1795984820.8243737);


--
-- Data for Name: scheduler_jobs; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: scheduler_runs; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: schema_version; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_version VALUES (9);


--
-- Data for Name: sessions; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.sessions VALUES ('025e994214ff439e92f789420dc49050', 'telegram:777', 1795984820.5093374, 1795984821.3973932, 3, 2, NULL, '{}');


--
-- Data for Name: status_lines; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Name: chatter_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.chatter_id_seq', 1, false);


--
-- Name: inbox_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.inbox_id_seq', 2, true);


--
-- Name: messages_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.messages_id_seq', 3, true);


--
-- Name: outbox_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.outbox_id_seq', 5, true);


--
-- Name: run_usage_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.run_usage_id_seq', 1, true);


--
-- Name: scheduler_runs_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.scheduler_runs_id_seq', 1, false);


--
-- Name: active_sessions active_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.active_sessions
    ADD CONSTRAINT active_sessions_pkey PRIMARY KEY (conversation_key);


--
-- Name: approvals approvals_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (key);


--
-- Name: approvals approvals_token_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_token_key UNIQUE (token);


--
-- Name: budgets budgets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budgets
    ADD CONSTRAINT budgets_pkey PRIMARY KEY (name);


--
-- Name: button_messages button_messages_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.button_messages
    ADD CONSTRAINT button_messages_pkey PRIMARY KEY (channel, account, chat_id, message_id);


--
-- Name: chat_marks chat_marks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chat_marks
    ADD CONSTRAINT chat_marks_pkey PRIMARY KEY (channel, account, chat_id, thread_id);


--
-- Name: chatter chatter_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chatter
    ADD CONSTRAINT chatter_pkey PRIMARY KEY (id);


--
-- Name: conversation_models conversation_models_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.conversation_models
    ADD CONSTRAINT conversation_models_pkey PRIMARY KEY (conversation_key);


--
-- Name: editor_sessions editor_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.editor_sessions
    ADD CONSTRAINT editor_sessions_pkey PRIMARY KEY (channel, session_id);


--
-- Name: imports imports_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.imports
    ADD CONSTRAINT imports_pkey PRIMARY KEY (name);


--
-- Name: inbound_seen inbound_seen_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inbound_seen
    ADD CONSTRAINT inbound_seen_pkey PRIMARY KEY (channel, message_id);


--
-- Name: inbox inbox_conversation_key_seq_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_conversation_key_seq_key UNIQUE (conversation_key, seq);


--
-- Name: inbox inbox_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (id);


--
-- Name: leases leases_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (name);


--
-- Name: messages messages_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.messages
    ADD CONSTRAINT messages_pkey PRIMARY KEY (id);


--
-- Name: offsets offsets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.offsets
    ADD CONSTRAINT offsets_pkey PRIMARY KEY (channel, account);


--
-- Name: outbox outbox_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);


--
-- Name: pairing_approved pairing_approved_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.pairing_approved
    ADD CONSTRAINT pairing_approved_pkey PRIMARY KEY (channel, sender);


--
-- Name: pairing_codes pairing_codes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.pairing_codes
    ADD CONSTRAINT pairing_codes_pkey PRIMARY KEY (code);


--
-- Name: previews previews_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.previews
    ADD CONSTRAINT previews_pkey PRIMARY KEY (anchor);


--
-- Name: run_usage run_usage_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_usage
    ADD CONSTRAINT run_usage_pkey PRIMARY KEY (id);


--
-- Name: scheduler_jobs scheduler_jobs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scheduler_jobs
    ADD CONSTRAINT scheduler_jobs_pkey PRIMARY KEY (id);


--
-- Name: scheduler_runs scheduler_runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scheduler_runs
    ADD CONSTRAINT scheduler_runs_pkey PRIMARY KEY (id);


--
-- Name: sessions sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (session_id);


--
-- Name: status_lines status_lines_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.status_lines
    ADD CONSTRAINT status_lines_pkey PRIMARY KEY (conversation_key, kind, message_id);


--
-- Name: approvals_by_session; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approvals_by_session ON public.approvals USING btree (session_id);


--
-- Name: button_messages_by_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX button_messages_by_time ON public.button_messages USING btree (posted_at);


--
-- Name: chat_marks_by_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX chat_marks_by_time ON public.chat_marks USING btree (channel, account, marked_at);


--
-- Name: chatter_by_conversation; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX chatter_by_conversation ON public.chatter USING btree (conversation_key, id);


--
-- Name: editor_sessions_by_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX editor_sessions_by_time ON public.editor_sessions USING btree (channel, updated_at);


--
-- Name: inbound_seen_by_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX inbound_seen_by_time ON public.inbound_seen USING btree (seen_at);


--
-- Name: inbox_unfinished; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX inbox_unfinished ON public.inbox USING btree (conversation_key, seq) WHERE (state = ANY (ARRAY['accepted'::text, 'running'::text]));


--
-- Name: messages_live; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX messages_live ON public.messages USING btree (session_id, compacted_at, id);


--
-- Name: outbox_by_anchor; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX outbox_by_anchor ON public.outbox USING btree (anchor);


--
-- Name: outbox_waiting; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX outbox_waiting ON public.outbox USING btree (id) WHERE (state = 'pending'::text);


--
-- Name: pairing_codes_by_channel; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX pairing_codes_by_channel ON public.pairing_codes USING btree (channel, issued_at);


--
-- Name: run_usage_by_key; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX run_usage_by_key ON public.run_usage USING btree (conversation_key, id);


--
-- Name: run_usage_by_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX run_usage_by_time ON public.run_usage USING btree (created_at);


--
-- Name: scheduler_runs_by_job; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX scheduler_runs_by_job ON public.scheduler_runs USING btree (job_id, id);


--
-- Name: sessions_by_key; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sessions_by_key ON public.sessions USING btree (conversation_key);


--
-- Name: active_sessions active_sessions_session_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.active_sessions
    ADD CONSTRAINT active_sessions_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(session_id);


--
-- Name: messages messages_session_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.messages
    ADD CONSTRAINT messages_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(session_id);


--
-- PostgreSQL database dump complete
--

\unrestrict AADEZovachFfhowxH29o0LaNFoHbLWRexhbRerubzJ4JxFMli7S9Pv4iHz5v425

