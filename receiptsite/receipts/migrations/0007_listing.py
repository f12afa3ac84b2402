from django.db import migrations, models


class Migration(migrations.Migration):
    # The tenant's list: an index for each of its exact-match filters, in the list's keyset
    # order (newest first), so that a filtered page reads only its own rows at any size
    # (workflow_id has had its index since 0001).

    dependencies = [
        ("receipts", "0006_ratebucket"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="receipt",
            index=models.Index(
                fields=["tenant", "subject_name", "-id"], name="receipt_subject_name"
            ),
        ),
        migrations.AddIndex(
            model_name="receipt",
            index=models.Index(fields=["tenant", "phase", "-id"], name="receipt_phase"),
        ),
        migrations.AddIndex(
            model_name="receipt",
            index=models.Index(fields=["tenant", "session_id", "-id"], name="receipt_session_id"),
        ),
        migrations.AddIndex(
            model_name="receipt",
            index=models.Index(fields=["tenant", "outcome", "-id"], name="receipt_outcome"),
        ),
    ]
