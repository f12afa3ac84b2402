"""When a checkpoint was signed is the database's word, not the code's that inserts it.

`compromisekey` takes as proof that a receipt was logged before a key leaked a checkpoint whose
`signed_at` is before the leak. Until this migration the inserting code wrote that time, and
the site's database role may insert checkpoints: with a leaked key, whoever runs SQL as that
role could add a checkpoint of a forged log dated before the leak. Now the database stamps
`signed_at` of every signed checkpoint, and of every appended signature (whose time the
verification JSON shows), with its own clock, whatever the INSERT says:

- PostgreSQL: a BEFORE INSERT row trigger sets it to `clock_timestamp()`, the server's clock
  when the row is inserted, not `now()`: `now()` is when the transaction began, and a
  transaction opened before a leak and held open could then insert, after the leak, a
  checkpoint stamped before it. A note is signed before the row holding it is inserted, so
  the insert's time is never earlier than the signing: a conservative stamp. The function has
  a fixed search_path and names what it calls by schema, so no object the site role can create
  stands in for them; the site role owns no table, so it can neither drop nor disable the
  trigger (receipts/rowsecurity.py), and only a superuser could skip it.
- SQLite: a trigger cannot change the row it fires for, and one that updated the row after the
  insert would be refused by the table's own append-only guard. So the column's DEFAULT is the
  database's clock (`strftime('%Y-%m-%d %H:%M:%f', 'now')`, what Django's `Now()` is there),
  and a BEFORE INSERT trigger refuses any row whose `signed_at` is not exactly that value:
  omitted (the DEFAULT) or written as that same expression. SQLite's `now` is one value for the
  whole statement, to the millisecond. The database and the site share a host, its clock and
  the database file: whoever can write the file can drop the trigger, so on SQLite this holds
  the site's own statements to the clock, nothing more.

Changing the DEFAULT remakes both tables on SQLite, which drops their triggers with the old
tables: the append-only guards of 0004, 0005 and 0010 are installed again, with guards_v1 as
they were, after the stamp's trigger, so that an insert meeting an existing row is refused by
the append-only guard first, as before (SQLite fires the trigger made last first). Going back
drops the stamp's triggers and function, restores the DEFAULT-less column and, on SQLite, the
guards once more. Rows already stored keep the time their code wrote.
"""

from __future__ import annotations

import django.db.models.functions.datetime
from django.db import migrations, models

from receiptsite.receipts import guards_v1

# The tables whose `signed_at` the database stamps, each with its unique keys (the id only), for
# the append-only guards a remake on SQLite drops.
TABLES = {
    "receipts_signedcheckpoint": [("id",)],
    "receipts_appendedsignature": [("id",)],
}

STAMP = "receiptsite_stamp_signed_at"
POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION public.{STAMP}() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    NEW.signed_at := pg_catalog.clock_timestamp();
    RETURN NEW;
END
$$;
"""
# What Django's Now() is on SQLite: the database's clock, to the millisecond.
SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def stamp_trigger(table: str) -> str:
    return f"{table}_stamp_signed_at"


def postgres_trigger(table: str) -> str:
    return (
        f"CREATE TRIGGER {stamp_trigger(table)} BEFORE INSERT ON public.{table} "
        f"FOR EACH ROW EXECUTE FUNCTION public.{STAMP}();"
    )


def sqlite_trigger(table: str) -> str:
    return (
        f"CREATE TRIGGER {stamp_trigger(table)} BEFORE INSERT ON {table} "
        f"WHEN NEW.signed_at IS NOT {SQLITE_NOW} "
        f"BEGIN SELECT RAISE(ABORT, 'receiptsite: an INSERT into {table} with a signed_at "
        f"of its own is refused: the database stamps the time'); END;"
    )


def reinstall_guards(schema_editor):
    """SQLite: the append-only guards the remake of each table dropped, as 0004, 0005 and 0010
    built them (PostgreSQL keeps its triggers through ALTER TABLE)."""
    if schema_editor.connection.vendor == "sqlite":
        for table, keys in TABLES.items():
            guards_v1.install_append_only(schema_editor, table, keys)


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_FUNCTION, params=None)
        for table in TABLES:
            schema_editor.execute(postgres_trigger(table), params=None)
    elif vendor == "sqlite":
        for table in TABLES:
            schema_editor.execute(sqlite_trigger(table), params=None)
        reinstall_guards(schema_editor)
    else:
        raise RuntimeError(f"no signing-time stamp for {vendor}")


def remove(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        on = f" ON public.{table}" if vendor == "postgresql" else ""
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {stamp_trigger(table)}{on};", params=None)
    if vendor == "postgresql":
        schema_editor.execute(f"DROP FUNCTION IF EXISTS public.{STAMP}();", params=None)


def guards_after_going_back(apps, schema_editor):
    reinstall_guards(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0012_site_role_shadows_nothing"),
    ]

    operations = [
        # Going back, last: the guards the remake of the tables dropped (SQLite).
        migrations.RunPython(migrations.RunPython.noop, guards_after_going_back),
        migrations.AlterField(
            model_name="signedcheckpoint",
            name="signed_at",
            field=models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
        ),
        migrations.AlterField(
            model_name="appendedsignature",
            name="signed_at",
            field=models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
        ),
        migrations.RunPython(install, remove),
    ]
