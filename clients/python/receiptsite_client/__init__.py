"""receiptsite-client: publish execution receipts to a receiptsite and check them.

Never imports Django or the site: it speaks to a site over HTTP only.
"""
