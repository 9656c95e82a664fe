"""The app's limits on what a visitor may ask for, one constant each; every message that names a limit
formats it from here (and the README quotes these names)."""

from lessons.inspector import MAX_NEW_TOKENS, MAX_PROMPT_TOKENS  # noqa: F401 (the inspector's own limits)
from ui.checkpoints import MAX_MODELS  # noqa: F401 (models held by the server at once)
from ui.text import MAX_CHARS as QUOTE_CHARS  # noqa: F401 (outside text quoted in a message)

PROMPT_CHARS = 20_000         # a prompt typed on the home page or on the live (Figure 3) pages
LONG_PROMPT_CHARS = 40_000    # a prompt on the inspector and the indexer-pools page
URL_PROMPT_CHARS = 1_500      # the longest prompt a link carries; longer ones are left out of the URL
LIVE_TOKENS = 1_024           # tokens traced for the Figure 3 pages (the last ones are kept)
POOL_TOKENS = 2_048           # the indexer-pools re-run keeps [rows, heads, entries] logits per Reindex layer
DSPARK_TOKENS = 4_096         # prompt tokens on the DSpark page (the model's positions may allow fewer)
