"""Rows inserted with hand-written statements: what bulk_create() and Model.objects.create()
do for a model with no signals and no parents, without compiling an INSERT on every call.

Ingest inserts its receipts and its audit entries under the log's lock, where the ORM's
compilation was most of the work: 100 receipts took 8.8-12.1 ms of CPU through bulk_create on
SQLite and 4.3-5.6 ms here (PostgreSQL: 15.4-17.0 and 12.6-14.4); one audit entry 124 µs
through objects.create() and 44 µs here (PostgreSQL: 216 and 107). Each value is what the ORM
would write: the field's pre_save() (an auto_now stamp included), then its get_db_prep_save().
Each object gets the primary key the database assigned, and is then as saved as the ORM's own.
A model with a parent, or one whose pre_save or post_save has a receiver, or a value that is an
expression, is saved by the ORM instead, one save() each, so that nothing it would do is
skipped. insert_rows() writes rows of values already prepared (the log's entries, nodes and
heads). On PostgreSQL both send a batch as one array per column (UNNEST), one statement text
whatever the number of rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connections, models
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models.signals import post_save, pre_save

_M = TypeVar("_M", bound=models.Model)


class InsertQuerySet(models.QuerySet[_M]):
    def insert(self, objs: Sequence[_M]) -> None:
        """Insert `objs`, new instances of this model, in order, in as few statements as the
        database's limit on parameters allows; each gets its primary key."""
        if not objs:
            return
        model = self.model
        if not (
            model._meta.parents or pre_save.has_listeners(model) or post_save.has_listeners(model)
        ):
            connection = connections[self.db]
            fields = inserted_fields(model)
            rows = [
                [
                    field.get_db_prep_save(field.pre_save(obj, add=True), connection)
                    for field in fields
                ]
                for obj in objs
            ]
            # An expression (F(), Now()...) is the ORM's to compile.
            if not any(hasattr(value, "as_sql") for row in rows for value in row):
                _insert(model, objs, fields, rows, connection)
                return
        for obj in objs:
            obj.save(force_insert=True, using=self.db)


def _insert(
    model: type[models.Model], objs: Sequence[models.Model], fields: list[models.Field[Any, Any]],
    rows: list[list[Any]], connection: Any,
) -> None:
    """The statements of insert(), for `rows` of values prepared by their fields."""
    into, arrays = _sql(model, fields, connection)
    returning = f"RETURNING {connection.ops.quote_name(model._meta.pk.column)}"  # type: ignore[union-attr]
    with connection.cursor() as cursor:
        if arrays is not None and len(objs) > 1:
            # PostgreSQL: one array per column, whatever the number of rows (as Django's own
            # bulk_create does there): one statement text, which psycopg parses once and the
            # connection prepares (lib/postgresql), against a text of 2,000 placeholders for
            # 100 receipts parsed anew by psycopg on every batch.
            columns = [list(column) for column in zip(*rows, strict=True)]
            cursor.execute(f"{into} SELECT * FROM UNNEST({arrays}) {returning}", columns)
            _saved(objs, [found[0] for found in cursor.fetchall()], connection.alias)
            return
        limit = connection.ops.bulk_batch_size(fields, objs) if len(objs) > 1 else 1
        size = limit or len(objs)
        row = "(" + ", ".join(["%s"] * len(fields)) + ")"
        for start in range(0, len(objs), size):
            chunk = rows[start : start + size]
            params = [value for values in chunk for value in values]
            cursor.execute(f"{into} VALUES {', '.join([row] * len(chunk))} {returning}", params)
            ids = [found[0] for found in cursor.fetchall()]
            _saved(objs[start : start + size], ids, connection.alias)


def _saved(objs: Sequence[models.Model], ids: list[Any], alias: str) -> None:
    """Each object inserted, in order, with the primary key the database returned for it."""
    for obj, pk in zip(objs, ids, strict=True):
        obj.pk = pk
        obj._state.adding, obj._state.db = False, alias


def inserted_fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    """The model's columns but its primary key, which the database assigns."""
    return [field for field in model._meta.concrete_fields if not field.primary_key]


_sql_cache: dict[tuple[type[models.Model], tuple[str, ...], str], tuple[str, str | None]] = {}


def _sql(
    model: type[models.Model], fields: Sequence[models.Field[Any, Any]], connection: Any
) -> tuple[str, str | None]:
    """`INSERT INTO t (columns)` for `fields`, and on PostgreSQL UNNEST's arguments for them
    (`(%s)::uuid[], ...`), None where an array cannot hold a column's values (see
    _unnestable) or on another database; derived once per process, model, columns and
    database. An array's type is the column's without its length (varchar[], not
    varchar(200)[]: nothing is cut)."""
    key = (model, tuple(str(field.column) for field in fields), connection.vendor)
    if key not in _sql_cache:
        quote = connection.ops.quote_name
        into = f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(c) for c in key[1])})"
        arrays = (
            ", ".join(f"(%s)::{str(field.db_type(connection)).split('(')[0]}[]" for field in fields)
            if connection.vendor == "postgresql" and all(_unnestable(f, connection) for f in fields)
            else None
        )
        _sql_cache[key] = (into, arrays)
    return _sql_cache[key]


def _stored_as(field: models.Field[Any, Any]) -> models.Field[Any, Any]:
    """The field whose type a column has: a foreign key's target's."""
    return field.target_field if field.is_relation else field  # type: ignore[attr-defined,no-any-return]


def _placed_plainly(field: models.Field[Any, Any], connection: Any) -> bool:
    """Whether the field's value goes in as a plain `%s` whatever the value. Django's UNNEST
    leaves out every field with a placeholder of its own; a BinaryField has one, which is
    `%s` but on a backend that overrides binary_placeholder_sql (MySQL's `_binary %s`), and
    the receipts' bytes and signatures are BinaryFields."""
    own = getattr(type(field), "get_placeholder_sql", None)
    if own is not None and own is models.BinaryField.get_placeholder_sql:
        overridden = type(connection.ops).binary_placeholder_sql
        return overridden is BaseDatabaseOperations.binary_placeholder_sql  # type: ignore[no-any-return]
    return not hasattr(field, "get_placeholder_sql") and not hasattr(field, "get_placeholder")


def _unnestable(field: models.Field[Any, Any], connection: Any) -> bool:
    """Under the conditions of Django's own UNNEST (backends/postgresql/compiler.py): a field
    of a standard type, placed as a plain parameter."""
    return (
        _placed_plainly(field, connection)
        and _stored_as(field).get_internal_type() in connection.data_types
    )


def insert_rows(
    connection: Any, model: type[models.Model], columns: Sequence[str], rows: Sequence[Any]
) -> None:
    """INSERT `rows` (tuples of values ready for the database, one per column named) into the
    model's table. On PostgreSQL, one statement of one array per column (UNNEST): the log's
    append wrote its entries, nodes and heads (about 400 rows for 100 receipts) with
    executemany, one execution on the server per row. Elsewhere executemany, which SQLite
    runs as one prepared statement in a loop of its own."""
    if not rows:
        return
    by_column = {str(field.column): field for field in model._meta.concrete_fields}
    into, arrays = _sql(model, [by_column[column] for column in columns], connection)
    with connection.cursor() as cursor:
        if arrays is not None and len(rows) > 1:
            values = [list(column) for column in zip(*rows, strict=True)]
            cursor.execute(f"{into} SELECT * FROM UNNEST({arrays})", values)
        else:
            cursor.executemany(f"{into} VALUES ({', '.join(['%s'] * len(columns))})", rows)
