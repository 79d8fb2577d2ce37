"""Word pools for task projects: the nouns, project words, module words and class suffixes that
name a generated project's package, modules, functions and class, split into training and
held-out pools (HELDOUT_WORDS) so evals can use projects the model never saw.

Contract: no nonce word and no training noun contains a held-out word, so held-out names never
reach training data.

Trade-offs: half the training nouns and project words are nonce words built from syllables
(`nonce_word`): a name the model cannot have memorised has to be copied from its context, while a
model that only ever sees a few real nouns memorises them and writes a training name where a
held-out one belongs (`titlecase_budget` for `titlecase_abalone`). The real half draws from a wide
pool of everyday nouns, so that every tokenizer piece of a held-out word (`wo` of wombat, `qu` of
quokka, ...) is a supervised target somewhere in training: a piece the model was never trained to
write is one it cannot be relied on to write. The price is a longer list here and rarer repeats of each noun.
"""
from __future__ import annotations

import random

# 40 data nouns, then 883 everyday ones (none inside or around a held-out word): a wide pool
# leaves no held-out word with a piece the model never wrote (module docstring).
NOUNS = ["price", "score", "order", "token", "invoice", "reading", "sample", "ticket", "record",
         "payment", "rating", "visit", "packet", "label", "metric", "entry", "shipment", "booking",
         "grade", "reward", "sensor", "signal", "message", "parcel", "budget", "vote", "step",
         "lap", "review", "coupon", "session", "frame", "pixel", "bid", "loan", "fare", "dose",
         "yield", "trip", "harvest",
         "apple", "bread", "chair", "window", "garden", "river", "mountain", "pocket", "kitchen",
         "wheel", "cheese", "coffee", "queen", "quilt", "question", "whistle", "thunder", "shadow",
         "bridge", "castle", "jacket", "market", "engine", "button", "candle", "basket", "bottle",
         "pencil", "rocket", "hammer", "ladder", "mirror", "needle", "pillow", "saddle", "shovel",
         "spider", "tunnel", "violin", "wagon", "anchor", "banner", "cabin", "canvas", "chimney",
         "cloud", "collar", "copper", "cradle", "crown", "crystal", "curtain", "dragon", "feather",
         "fountain", "galaxy", "goblet", "harbour", "helmet", "island", "jewel", "kettle", "knight",
         "lantern", "lemon", "magnet", "marble", "medal", "meadow", "napkin", "nickel", "orbit",
         "oyster", "palace", "parrot", "pepper", "pirate", "planet", "plum", "pudding", "puzzle",
         "quarry", "quiver", "rabbit", "radish", "ribbon", "scarf", "shelf", "shield", "silver",
         "sketch", "skull", "sleeve", "spoon", "square", "squid", "stamp", "statue", "sugar",
         "summit", "sword", "temple", "thread", "throne", "thumb", "tiger", "tomato", "torch",
         "towel", "tower", "trumpet", "turtle", "umbrella", "valley", "velvet", "vessel", "village",
         "wallet", "whale", "wheat", "whisker", "wizard", "wolf", "yacht", "yogurt", "zipper",
         "acorn", "badge", "beacon", "blanket", "branch", "brick", "brush", "bucket", "bundle",
         "cactus", "carpet", "cherry", "chess", "circus", "clock", "cobweb", "compass", "cookie",
         "cotton", "crate", "crumb", "diamond", "dolphin", "donkey", "eagle", "elbow", "falcon",
         "fence", "fiddle", "flame", "flute", "forest", "fossil", "frost", "ginger", "glove",
         "goose", "grape", "gravel", "guitar", "hawk", "honey", "hook", "horizon", "jigsaw",
         "juice", "kayak", "kitten", "knot", "lagoon", "lamb", "leaf", "lizard", "lobster",
         "locket", "mango", "mask", "melon", "mitten", "monkey", "moss", "mushroom", "nest",
         "noodle", "oven", "owl", "paddle", "panda", "peach", "pearl", "pebble", "penguin", "piano",
         "pickle", "pigeon", "pine", "pouch", "prism", "pumpkin", "quail", "quince", "raft",
         "raisin", "robin", "rope", "ruby", "sail", "salmon", "sandal", "shark", "sheep", "shell",
         "ship", "shoe", "shrub", "sled", "snail", "socks", "sponge", "squirrel", "stool", "straw",
         "swan", "syrup", "tablet", "teapot", "thorn", "toad", "toast", "tulip", "twig", "vase",
         "vine", "walnut", "wand", "wasp", "whip", "willow", "wing", "wreath", "wrench", "yarn"] + """
    acre actor adder album alley almond altar amber ankle antler apron arch archer armor arrow
    artist ash attic aunt avocado axe bacon bagel bait baker balcony ball balloon bamboo banana
    band bandit bank barn barrel baron bath battery bay bead beak beam bean bear beard bed bee
    beef beet bell belt bench berry bib bicycle bike bin bird biscuit bishop blade blender blimp
    block blossom blouse board boat bolt bone bonnet book boot boulder bow bowl box boxer
    bracelet brain brake bran brass bride brook broom brother bubble buckle bud buffalo bug bulb
    bull bullet bunny burger bus bush butter butterfly buzzer cab cabbage cable cage cake calf
    camel camera camp canal canary candy cane cannon canoe cap cape captain car caravan card
    cargo carrot cart carton cask cat cave cedar ceiling cell cellar cello chain chalk chapel
    chart cheek chef chick chicken chin chip chisel chord church cider cigar cinema citrus city
    clam clay cliff cloak closet clover clown club coach coal coast coat cobra cocoa coconut cod
    coin colt comb cone cook coral cord cork corn cottage couch cougar cow crab cracker crane
    crayon cream creek crew cricket crow cube cuckoo cucumber cup cupboard cushion cymbal daisy
    dam dancer dart deer desk dew dial diary dice dime diner dish ditch diver dock doctor dog
    doll dome door dough dove dragonfly drain drawer dress drill drum duck dune dust ear earth
    easel eel egg elk elm emerald envelope eraser fabric face fairy fan farm farmer fawn fern
    ferry fig film finch finger fir fire fish flag flask fleet flint flock floor flour flower
    fly foal fog folder foot fork fort fox frog fruit fudge funnel fur gate gear gecko gem giant
    gift giraffe glass glider globe gnome goat gold golf gong gown grain granite grass gull gum
    hair hall ham hamster hand handle hare harp hat hay hazel heart hedge herb heron hill hinge
    hippo hive hoe hole hood hoof horn horse hose hotel house husk hut ice icicle igloo ink inn
    iron ivy jam jar jaw jeans jelly jet jockey jug jungle kale kernel key kid king kite kiwi
    knee knife koala lace lake lamp lane lark lasso latch lawn lead leash ledge leek leg lens
    leopard letter lettuce lever lid lily lime linen lion lip lock log loom lotus lute mail
    mallet mammoth map mare mat match meal meat melody mill mint mist mole moon moose mop moth
    motor mound mouse mouth mud mug mule muffin mural nail navy neck nectar net nut nutmeg oak
    oar oat ocean octopus olive onion orange orchard organ ostrich otter ox pad page pail paint
    pansy pants paper parade park pasta paste path paw pea pear pedal pen perch pet petal pie
    pier pig pilot pin pipe pit pizza plank plate plow plug plume pod poet pole pond pony pool
    popcorn poppy porch port pot potato pottery powder prawn prince puppet puppy purse rack
    radio rail rain rake ram ranch rat ray reed reef rhino rice ring robe robot rock rod roof
    room rooster root rose rug ruler sack sage salad sand sardine satchel sauce saucer sausage
    saw scale scooter screw seal seed shack shed shirt shore shrimp sieve sign silk sink skate
    ski skirt sky slate sleigh slipper sloth smoke snake snow soap sofa soil soup spade spice
    spinach spire spool spruce stable stag stair star steak stem stew stick stone storm stove
    stream street string sub suit sun swamp sweater swing table tack tail tank tape tart taxi
    tea teacher tent thimble tile tin toe tofu tongue tool tooth top toy track tractor trail
    train tray tree trout truck trunk tub tuba tug tuna turkey turnip van vest vinegar violet
    visor waffle wall wave wax web well wharf whisk wig wind wine wire wood wool worm wren yak
    yard yeast yolk zebra zinc zoo
""".split()
HELDOUT_NOUNS = ["quokka", "zephyr", "marmot", "wombat", "pangolin", "meerkat", "saffron",
                 "glacier", "obsidian", "tamarind", "ocelot", "walrus", "lichen", "gazelle",
                 "bonsai", "tapir", "macaw", "fennec", "abalone", "manatee"]
PROJECT_WORDS = ["ledger", "harbor", "orchid", "ember", "atlas", "comet", "maple", "nimbus",
                 "quartz", "sparrow", "timber", "willow", "cinder", "delta", "fjord", "juniper",
                 "kestrel", "lumen", "meadow", "onyx", "pebble", "raven", "sable", "thistle"]
HELDOUT_PROJECT_WORDS = ["zeppelin", "axolotl", "narwhal", "basalt", "wisteria", "kumquat"]
SUFFIXES = ["", "kit", "lib", "tools", "py", "utils"]
MODULE_WORDS = ["utils", "text", "numbers", "lists", "helpers", "core", "stats", "series",
                "strings", "mathx", "collections_x", "formatting"]
CLASS_SUFFIXES = ["Tracker", "Ledger", "Registry", "Stack", "Buffer", "Pile"]
HELDOUT_WORDS = HELDOUT_NOUNS + HELDOUT_PROJECT_WORDS
NONCE_SHARE = 0.5  # share of training nouns / project words that are nonce words
CONSONANTS, VOWELS, CODAS = "bdfgklmnprstvz", "aeiou", ["", "", "", "n", "r", "l", "s", "x"]


def nonce_word(rng: random.Random) -> str:
    """A pronounceable made-up word of 2-3 syllables ("zorvi", "keltamu") that contains no held-out
    word, so the held-out split stays unseen."""
    while True:
        word = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) + rng.choice(CODAS)
                       for _ in range(rng.randint(2, 3)))
        if not any(h in word for h in HELDOUT_WORDS):
            return word


def pick_word(rng: random.Random, heldout: bool, words=NOUNS, heldout_words=HELDOUT_NOUNS) -> str:
    """A held-out word, or for training a nonce word (NONCE_SHARE of the time) or one of `words`."""
    if heldout:
        return rng.choice(heldout_words)
    return nonce_word(rng) if rng.random() < NONCE_SHARE else rng.choice(words)


def pick_names(rng: random.Random, heldout: bool, k: int) -> list[str]:
    """k distinct nouns for one project's functions and class."""
    if heldout:
        return rng.sample(HELDOUT_NOUNS, k)
    names: list[str] = []
    while len(names) < k:
        noun = pick_word(rng, heldout)
        if noun not in names:
            names.append(noun)
    return names
