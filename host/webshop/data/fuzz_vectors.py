"""Print the thefuzz / WebShop test vectors used by host/webshop/src/fuzz.rs and reward.rs.

Usage: python fuzz_vectors.py WEBSHOP_CHECKOUT
  with thefuzz installed (WebShop master pins thefuzz==0.19.0, difflib backend; thefuzz >= 0.20
  delegates to rapidfuzz) and WEBSHOP_CHECKOUT a clone of princeton-nlp/WebShop on `master`.
spaCy and rich are stubbed: the vectors only buy the goal's own product, so every noun tagging
gives title_score 1 and r_type 1.
"""
import json
import sys
import types

import thefuzz
from thefuzz import fuzz

# Stubs for the two heavy imports of web_agent_site/engine/goal.py.
spacy = types.ModuleType("spacy")
spacy.load = lambda name: (lambda text: [types.SimpleNamespace(text=w, pos_="NOUN") for w in text.split()])
sys.modules["spacy"] = spacy
rich = types.ModuleType("rich")
rich.print = print
sys.modules["rich"] = rich
sys.path.insert(0, sys.argv[1])
from web_agent_site.engine import goal as ws_goal  # noqa: E402

STR_PAIRS = [
    ("1\u20132", "1-2"),            # en dash
    ("men\u2019s", "mens"),         # right single quotation mark
    ("men's", "mens"),
    ("caf\u00e9", "cafe"),          # Latin-1 letter: removed
    ("Stra\u00dfe", "strasse"),
    ("\u0141\u00f3d\u017a", "lodz"),  # L-stroke and z-acute kept, o-acute removed
    ("\u03a3\u039f\u03a6\u039f\u03a3", "\u03c3\u03bf\u03c6\u03bf\u03c2"),  # final sigma
    ("\u0130stanbul", "istanbul"),  # lowercases to i + U+0307 after the \W pass
    ("e\u0301t\u00e9", "ete"),      # combining acute: a non-word character
    ("\u0939\u093f\u0902\u0926\u0940", "\u0939 \u0926"),  # Devanagari vowel signs are marks
    ("\uff38\uff2c", "xl"),         # fullwidth letters stay (and differ from ASCII)
    ("\u216b pack", "pack"),        # Roman numeral (Nl) is a word character
    ("\u00bd cup", "cup"),          # vulgar fraction (Latin-1): removed
    ("10\u00a0oz", "10 oz"),        # no-break space (Latin-1): removed, joins the tokens
    ("10\u2003oz", "10 oz"),        # em space: a separator
    ("gluten_free", "gluten free"), # underscore is a word character
    ("\u6771\u4eac tower", "tower"),
    ("\u2014", "x"),                # only punctuation: empty after processing
    # the table of docs' token_set_ratio examples (WebShop option and attribute pairs)
    ("x-large", "large"),
    ("small", "x-small"),
    ("xx-large", "x-large"),
    ("32w x 30l", "32w x 32l"),
    ("pack of 2", "pack of 3"),
    ("8.5", "8"),
    ("medium", "large"),
    ("king", "queen"),
    ("black", "blue"),
    ("soy free", "sugar free"),
    ("gluten free", "gluten-free"),
    ("machine washable", "machine wash"),
    ("a" * 10 + "b", "a" * 200 + "b"),  # difflib's autojunk (len(b) >= 200)
]
PAIR_VS_STR = [
    (("size", "6 ounce"), "6 ounce"),
    (("size", "large"), "x-large"),
    (("size", "x-large"), "large"),
    (("size", "large"), "large"),
    (("color", "navy blue"), "navy blue"),
    (("color", "heather grey"), "grey"),
    (("flavor name", "sea salt"), "sea salt & vinegar"),
    (("size", "men's 8"), "men's 8"),
    (("size", "10\u00a0oz"), "10 oz"),     # repr escapes the no-break space as \xa0
    (("size", "1\u20132 years"), "1-2 years"),
    (("color", "caf\u00e9"), "cafe"),
    (("size", "a\nb"), "a n b"),          # repr escapes the newline as \n
    (("size", "it's \"xl\""), "it s xl"),
    (("size", "x\u2028l"), "x u2028 l"),  # line separator: \u2028
]


def opt(v):
    return list(v) if isinstance(v, tuple) else v


out = {
    "thefuzz": thefuzz.__version__,
    "token_set_ratio": [[opt(a), b, fuzz.token_set_ratio(a, b)] for a, b in STR_PAIRS],
    # get_option_reward calls token_set_ratio(purchased_value, goal_option).
    "pair_vs_str": [[opt(g), p, fuzz.token_set_ratio(p, g)] for g, p in PAIR_VS_STR],
    "normalize_color_pair": [
        [list(g), opt(ws_goal.normalize_color(g))]
        for g in [("color", "black"), ("color", "washed black"), ("size", "tan"), ("size", "large")]
    ],
}

# get_reward on the goal's own product: the spec's worked example (attributes machine wash and
# cotton spandex, options black + large, budget 30, bought at 19.99) as a human goal (a list of
# values) and as a synthetic goal (a {name: value} dict, scored as (name, value) pairs).
product = {
    "name": "Acme Women's Cotton Spandex Crew Neck T-Shirt",
    "query": "women's t-shirts",
    "product_category": "Clothing › Women › T-Shirts",
    "Attributes": ["machine wash", "cotton spandex", "short sleeve"],
    "Title": "Acme Women's Cotton Spandex Crew Neck T-Shirt",
    "BulletPoints": [], "Description": "",
}
rewards = []
for goal_options in [["black", "large"], {"color": "black", "size": "large"}]:
    goal = dict(product, attributes=["machine wash", "cotton spandex"], price_upper=30.0,
                goal_options=goal_options)
    for bought in [{"color": "black", "size": "large"}, {"color": "black", "size": "x-large"},
                   {"color": "heather grey", "size": "large"}, {"size": "large"}]:
        r = ws_goal.get_reward(product, goal, 19.99, bought)
        rewards.append([goal_options, bought, r])
out["get_reward"] = rewards
print(json.dumps(out, ensure_ascii=True, indent=1))
