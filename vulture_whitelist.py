"""Names that frameworks and tools use by name, so vulture (scripts/test.sh, [tool.vulture]
in pyproject.toml) does not see them used. Decorated views, error handlers and the protocol
explorer's rules are skipped by ``ignore_decorators`` there instead. Vulture matches by
name: each line below keeps that name alive everywhere, so list only names a framework
reads, with who reads them."""

from vulture.whitelists.whitelist_utils import Whitelist

_ = Whitelist()

# gunicorn reads its settings and server hooks from gunicorn.conf.py by name (some are
# also used elsewhere, so vulture would not miss them today; all are listed).
_.bind
_.workers
_.worker_class
_.worker_connections
_.threads
_.reuse_port
_.http_parser
_.keepalive
_.timeout
_.graceful_timeout
_.accesslog
_.errorlog
_.loglevel
_.limit_request_field_size
_.control_socket_disable
_.on_starting
_.when_ready
_.post_fork
_.on_exit
_.child_exit

# RQ: `rq worker -c workers.rq_config` reads QUEUES; a Worker subclass sets its death penalty.
_.QUEUES
_.death_penalty_class

# FULFILMENT_ACTION and RQ jobs named by dotted path (bench/fulfilment.py and
# bench/drain_round.py, the fault tests).
_.noop
_.noop_action
_.exit_worker
_.slot_state
_.exit_in_action
_.interrupt_in_action
_.apply_twice
_.reverse_twice
_.regrant_twice
_.insert_order

# msgspec and the ledger's Redis hashes write struct fields by name: fields no Python code
# reads back are answered as JSON (ledger/read/, webhook/openapi.yaml) or stored.
_.delivered_payload_sha256
_.last_failed_event_type
_.last_refund_event_type
_.leases_expired
_.job_failures
_.jobs_skipped
_.last_skip
_.heartbeat_window_s
_.sweeper_passes
_.minute
_.peak_deliveries
_.window_start
_.interval_s
_.started_ms
_.finished_ms

# The standard library and Werkzeug call or read these by name.
_.row_factory  # sqlite3.Connection
_.max_age  # werkzeug's ResponseCacheControl
_.merge_slashes  # werkzeug's Map: each Rule reads it as it is added (webhook/__init__.py)
_.do_GET  # http.server.BaseHTTPRequestHandler
_.do_POST
_.do_PUT
_.do_HEAD
_.log_message
_.daemon_threads  # socketserver.ThreadingMixIn
_.request_queue_size  # socketserver.TCPServer: the listen backlog
_.resolve_redirects  # requests.Session.send (workers/http_connections.py Unredirected)
_.protocol_version
_._child_ctor  # honcho's Process builds its Popen with it (ledgerctl/run_local.py)

# Click runs a command its group names; FULFILMENT_EFFECT functions are imported by name.
_.migrate_command  # webhook-ledger downstream migrate (ledgerctl/cli_downstream.py)
_.record_effect  # tests/integration/test_database_actions.py
_.raise_sqlstate
_.take_back  # a REVERSAL_EFFECT, imported by name there too
_.counted_nothing  # tests/integration/test_effect_rows.py: a REVERSAL_EFFECT too
_.revoke_meanwhile  # a REVERSAL_EFFECT: tests/integration/test_shop_reversal.py

# pytest: plugins, hooks and marks by name.
_.pytest_plugins
_.pytest_cmdline_main
_.pytestmark
_.dist  # config.option.dist, pytest-xdist's --dist

# The purchase (ledger/purchase.py): struct fields only serialised, for the actions (the HTTP
# body, a module:function's dict, orders.purchase) and the ops API.
_.customer_details
_.billing_reason
_.unit_amount
_.amount_total
_.checkout_session_id
_.customer_email
_.customer_name
_.line_items
_.subscription
# ledger/reversals.py Reversal: fields of the reversal call, read by actions
_.refund_ids
_.refunded_amount
_.dispute_status

# Probes prove-action imports by name (--effects, --reversals module:function) in its tests.
_.orders_of
_.revokes_of
