"""Definitions export and import (GET/POST /api/definitions, `export_definitions`,
`import_definitions`), in RabbitMQ's JSON layout so files move between RabbitMQ and us.

A mixin of `admin.Admin`. Export lists users (with their limits), vhosts, permissions, vhost
limits (as RabbitMQ's "vhost-limits" parameters), policies, non-exclusive queues, exchanges other
than the default and `amq.*` ones, and bindings other than the default exchange's. Import
applies, in order, users, vhosts, permissions, vhost limits, policies, exchanges, queues,
bindings (other parameters are ignored), and stops at the first invalid entry with a 400.
"""

from __future__ import annotations

from typing import Any

from .errors import AdminError, BadRequest

__all__ = ["DefinitionsOps"]

_KEYS = ("users", "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters",
         "policies", "queues", "exchanges", "bindings")


class DefinitionsOps:
    broker: Any
    settings: Any

    def export_definitions(self) -> dict:
        s = self.settings
        queues = [{"name": q["name"], "vhost": q["vhost"], "durable": q["durable"],
                   "auto_delete": q["auto_delete"], "arguments": q["arguments"]}
                  for q in self.list_queues() if not q["exclusive"]]
        exchanges = [{k: x[k] for k in ("name", "vhost", "type", "durable", "auto_delete",
                                        "internal", "arguments")}
                     for x in self.list_exchanges() if x["name"] and not x["name"].startswith("amq.")]
        bindings = [{k: b[k] for k in ("source", "vhost", "destination", "destination_type",
                                       "routing_key", "arguments")}
                    for b in self.list_bindings() if b["source"]]
        vhosts = [{"name": v["name"], "description": v["description"], "tags": v["tags"],
                   "metadata": v["metadata"]} for v in self.list_vhosts()]
        return {
            "rabbit_version": s.version, "rabbitmq_version": s.version,
            "product_name": s.product, "product_version": s.version,
            "users": self.list_users(), "vhosts": vhosts, "permissions": self.list_permissions(),
            "topic_permissions": [], "global_parameters": [],
            "parameters": [{"value": row["value"], "vhost": row["vhost"],
                            "component": "vhost-limits", "name": "limits"}
                           for row in self.list_vhost_limits()],
            "policies": self.list_policies(), "queues": queues, "exchanges": exchanges,
            "bindings": bindings,
        }

    def import_definitions(self, defs: Any) -> None:
        if not isinstance(defs, dict):
            raise BadRequest("definitions must be a JSON object")
        for key in _KEYS:
            if not isinstance(defs.get(key, []), list):
                raise BadRequest(f"'{key}' must be a list")
        try:
            for u in defs.get("users", []):
                self.put_user(u["name"], password=u.get("password"),
                              password_hash=None if "password" in u else u.get("password_hash", ""),
                              hashing_algorithm=u.get("hashing_algorithm"), tags=u.get("tags", []))
                for name, value in (u.get("limits") or {}).items():
                    self.set_user_limit(u["name"], name, value)
            for v in defs.get("vhosts", []):
                meta = v.get("metadata") or {}
                self.add_vhost(v["name"], description=v.get("description", meta.get("description")),
                               tags=v.get("tags", meta.get("tags")))
            for p in defs.get("permissions", []):
                self.set_permissions(p["vhost"], p["user"], p.get("configure", ""),
                                     p.get("write", ""), p.get("read", ""))
            for p in defs.get("parameters", []):
                if p.get("component") == "vhost-limits":
                    for name, value in (p.get("value") or {}).items():
                        self.set_vhost_limit(p["vhost"], name, value)
            for p in defs.get("policies", []):
                self.set_policy(p["vhost"], p["name"], p.get("pattern"), p.get("definition"),
                                priority=p.get("priority", 0), apply_to=p.get("apply-to", "all"))
            for x in defs.get("exchanges", []):
                self.declare_exchange(x["vhost"], x["name"], x.get("type", "direct"),
                                      durable=x.get("durable", True),
                                      auto_delete=x.get("auto_delete", False),
                                      internal=x.get("internal", False),
                                      arguments=x.get("arguments") or {})
            for q in defs.get("queues", []):
                self.declare_queue(q["vhost"], q["name"], durable=q.get("durable", True),
                                   auto_delete=q.get("auto_delete", False),
                                   arguments=q.get("arguments") or {})
            for b in defs.get("bindings", []):
                self.bind(b["vhost"], b["source"], b.get("destination_type", "queue"),
                          b["destination"], b.get("routing_key", ""), b.get("arguments") or {})
        except KeyError as e:
            raise BadRequest(f"missing key {e} in definitions") from None
        except AdminError as e:
            raise BadRequest(f"definitions import failed: {e.reason}") from None
