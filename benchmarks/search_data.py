"""The search benchmark's data: a generated catalog of 300+ assets and 60 labelled queries.

The catalog is what a CDN of a dozen small brands holds: per zone the standard files (logos,
PWA icons, a social card, title cards) and a set of photos and illustrations named the way people
name files (``ferrari-488.jpg``, ``golden-retriever-puppy.jpg``), plus shared stock images.
Queries are of four kinds: the file's own words (``keyword``), other words for the same thing
(``synonym``), the file's words misspelled (``typo``) and what the picture shows (``descriptive``,
e.g. "red sports car" for ``ferrari-488.jpg``). Each query lists the paths a person would accept.
Everything is deterministic: the same catalog and queries on every run.
"""

from __future__ import annotations

from dataclasses import dataclass

# zone -> files under banners/ (photos and illustrations, the zone's subject matter)
SUBJECTS: dict[str, tuple[str, ...]] = {
    "autoworld": (
        "ferrari-488.jpg", "porsche-911-carrera.jpg", "tesla-model-s.jpg", "ford-f150-pickup.jpg",
        "vw-beetle-classic.jpg", "lamborghini-huracan.jpg", "toyota-prius.jpg", "jeep-wrangler.jpg",
        "bmw-m3.jpg", "mini-cooper.jpg", "harley-davidson.jpg", "school-bus.jpg", "tire-closeup.jpg",
        "garage-workshop.jpg", "ev-charging-station.jpg", "steering-wheel.jpg", "highway-night.jpg",
        "car-wash.jpg", "traffic-light.svg", "spark-plug.png",
    ),
    "bankingonai": (
        "hero-dark.webp", "hero-light.webp", "vault-door.jpg", "credit-card-stack.png", "piggy-bank.png",
        "stock-chart-up.svg", "atm-machine.jpg", "coins-pile.jpg", "mortgage-calculator.png",
        "handshake-deal.jpg", "wallet-leather.jpg", "bitcoin-gold.png", "signature-pen.jpg",
        "bank-building.jpg", "savings-jar.jpg", "invoice-paper.png", "dollar-bills.jpg",
        "calculator-desk.jpg", "safe-deposit-box.jpg", "pie-chart.svg",
    ),
    "petcare": (
        "golden-retriever-puppy.jpg", "tabby-cat.jpg", "parrot-macaw.jpg", "goldfish-bowl.jpg",
        "hamster-wheel.jpg", "dog-leash.png", "vet-clinic.jpg", "paw-print.svg", "kitten-yarn.jpg",
        "german-shepherd.jpg", "rabbit-carrot.jpg", "dog-bowl.png", "cat-tree.jpg", "horse-stable.jpg",
        "turtle-pond.jpg", "bird-cage.jpg", "flea-collar.png", "grooming-brush.jpg", "dog-bed.jpg",
        "aquarium-plants.jpg",
    ),
    "foodhub": (
        "margherita-pizza.jpg", "sushi-platter.jpg", "espresso-cup.jpg", "avocado-toast.jpg",
        "burger-fries.jpg", "ramen-bowl.jpg", "croissant.jpg", "salad-bowl.jpg", "chef-hat.svg",
        "taco-truck.jpg", "chocolate-cake.jpg", "strawberry-smoothie.jpg", "grilled-steak.jpg",
        "pancakes-syrup.jpg", "ice-cream-cone.jpg", "wine-glass.jpg", "bread-loaf.jpg", "cutting-board.jpg",
        "spaghetti-bolognese.jpg", "farmers-market.jpg",
    ),
    "travelco": (
        "eiffel-tower.jpg", "santorini-sunset.jpg", "tokyo-skyline.jpg", "beach-palm-trees.jpg",
        "mountain-lake.jpg", "passport-stamp.png", "suitcase.svg", "airplane-wing.jpg",
        "desert-dunes.jpg", "northern-lights.jpg", "venice-gondola.jpg", "safari-elephant.jpg",
        "hot-air-balloon.jpg", "cruise-ship.jpg", "camping-tent.jpg", "world-map.svg", "train-station.jpg",
        "hotel-lobby.jpg", "great-wall.jpg", "snowy-chalet.jpg",
    ),
    "fitlife": (
        "yoga-mat.jpg", "dumbbells.jpg", "running-shoes.jpg", "treadmill.jpg", "cyclist-road.jpg",
        "swimming-pool.jpg", "protein-shake.jpg", "boxing-gloves.jpg", "kettlebell.png", "jump-rope.png",
        "marathon-finish.jpg", "pilates-class.jpg", "tennis-racket.jpg", "soccer-ball.png",
        "basketball-hoop.jpg", "stopwatch.svg", "rock-climbing.jpg", "ski-slope.jpg", "surfboard.jpg",
        "water-bottle.png",
    ),
    "techstart": (
        "laptop-desk.jpg", "server-rack.jpg", "circuit-board.jpg", "robot-arm.jpg", "cloud-upload.svg",
        "code-editor-dark.png", "smartphone-mockup.png", "vr-headset.jpg", "drone-flying.jpg",
        "mechanical-keyboard.jpg", "data-center.jpg", "satellite-dish.jpg", "usb-cable.png",
        "smartwatch.png", "3d-printer.jpg", "wifi-router.jpg", "solar-panel.jpg", "microchip.svg",
        "team-meeting.jpg", "startup-office.jpg",
    ),
    "greenleaf": (
        "oak-tree.jpg", "sunflower-field.jpg", "fern-leaves.jpg", "cactus.jpg", "waterfall.jpg",
        "autumn-forest.jpg", "rose-bouquet.jpg", "bamboo-grove.jpg", "tulip-garden.jpg", "mushrooms.jpg",
        "bee-on-flower.jpg", "seedling-soil.jpg", "pine-cone.jpg", "lotus-pond.jpg", "cherry-blossom.jpg",
        "compost-bin.png", "watering-can.svg", "greenhouse.jpg", "wheat-field.jpg", "recycle-symbol.svg",
    ),
    "musicbox": (
        "electric-guitar.jpg", "grand-piano.jpg", "drum-kit.jpg", "vinyl-record.jpg", "headphones.png",
        "microphone.svg", "concert-crowd.jpg", "violin.jpg", "saxophone.jpg", "dj-turntable.jpg",
        "music-notes.svg", "cassette-tape.png", "trumpet.jpg", "ukulele.jpg", "recording-studio.jpg",
        "speaker-stack.jpg", "harp.jpg", "accordion.jpg", "metronome.png", "festival-stage.jpg",
    ),
    "homestyle": (
        "leather-sofa.jpg", "kitchen-island.jpg", "bathroom-tiles.jpg", "bedroom-lamp.jpg",
        "dining-table.jpg", "bookshelf.jpg", "fireplace.jpg", "houseplant-monstera.jpg",
        "wooden-chair.jpg", "window-curtains.jpg", "persian-rug.jpg", "coffee-mug.png", "candle-glow.jpg",
        "garden-patio.jpg", "laundry-basket.jpg", "wall-clock.svg", "paint-roller.png", "toolbox.png",
        "front-door.jpg", "bunk-bed.jpg",
    ),
    "kidsplay": (
        "teddy-bear.jpg", "lego-bricks.jpg", "rocking-horse.jpg", "crayons.jpg", "playground-slide.jpg",
        "toy-train.jpg", "kite-flying.jpg", "sandbox.jpg", "rubber-duck.png", "balloon-bunch.png",
        "puzzle-pieces.svg", "school-backpack.jpg", "birthday-cake.jpg", "finger-paint.jpg",
        "swing-set.jpg", "dinosaur-toy.jpg", "picture-book.jpg", "building-blocks.png", "tricycle.jpg",
        "stuffed-unicorn.jpg",
    ),
    "medcare": (
        "stethoscope.jpg", "pill-bottle.png", "hospital-bed.jpg", "dna-helix.svg", "first-aid-kit.png",
        "syringe.svg", "doctor-portrait.jpg", "xray-chest.jpg", "ambulance.jpg", "heart-rate.svg",
        "microscope.jpg", "wheelchair.jpg", "dental-chair.jpg", "blood-pressure.jpg", "face-mask.png",
        "thermometer.png", "nurse-station.jpg", "lab-test-tubes.jpg", "brain-scan.jpg", "bandage.png",
    ),
}

# Every zone also holds the standard files (categories from the spec: logos, icons, github, titles).
STANDARD = ("logos/logo.svg", "logos/logo-dark.svg", "logos/wordmark.png", "icons/icon-192.png",
            "icons/icon-512.png", "github/social-card.png")
TITLES: dict[str, tuple[str, ...]] = {
    "autoworld": ("title-car-reviews.png",), "bankingonai": ("title-investing-101.png",),
    "petcare": ("title-puppy-training.png",), "foodhub": ("title-weeknight-recipes.png",),
    "travelco": ("title-summer-deals.png",), "fitlife": ("title-30-day-challenge.png",),
    "techstart": ("title-product-launch.png",), "greenleaf": ("title-gardening-tips.png",),
    "musicbox": ("title-live-sessions.png",), "homestyle": ("title-spring-makeover.png",),
    "kidsplay": ("title-back-to-school.png",), "medcare": ("title-health-checkup.png",),
}
STOCKS = ("stocks/photos/city-street-rain.jpg", "stocks/photos/office-coworkers.jpg",
          "stocks/photos/abstract-gradient.png", "stocks/photos/white-marble.jpg",
          "stocks/photos/blue-sky-clouds.jpg", "stocks/photos/old-paper-texture.jpg",
          "stocks/icons/arrow-right.svg", "stocks/icons/check-mark.svg", "stocks/icons/search.svg",
          "stocks/icons/shopping-cart.svg", "stocks/icons/user-avatar.svg", "stocks/icons/envelope-mail.svg")


def catalog() -> list[str]:
    """Every CDN path of the generated catalog (stable order)."""
    paths: list[str] = []
    for zone, files in SUBJECTS.items():
        paths += [f"{zone}/v1/banners/{name}" for name in files]
        paths += [f"{zone}/v1/{rel}" for rel in STANDARD]
        paths += [f"{zone}/v1/titles/{name}" for name in TITLES[zone]]
    return paths + list(STOCKS)


@dataclass(frozen=True)
class LabelledQuery:
    text: str
    kind: str                  # keyword | synonym | typo | descriptive
    relevant: tuple[str, ...]  # CDN paths a person would accept
    held_out: bool = False     # written after the text recipe, calibration and blend were chosen


def _b(zone: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{zone}/v1/banners/{n}" for n in names)


QUERIES: tuple[LabelledQuery, ...] = (
    # the file's own words
    LabelledQuery("ferrari 488", "keyword", _b("autoworld", "ferrari-488.jpg")),
    LabelledQuery("golden retriever", "keyword", _b("petcare", "golden-retriever-puppy.jpg")),
    LabelledQuery("eiffel tower", "keyword", _b("travelco", "eiffel-tower.jpg")),
    LabelledQuery("piggy bank", "keyword", _b("bankingonai", "piggy-bank.png")),
    LabelledQuery("grand piano", "keyword", _b("musicbox", "grand-piano.jpg")),
    LabelledQuery("musicbox logo", "keyword", ("musicbox/v1/logos/logo.svg", "musicbox/v1/logos/logo-dark.svg",
                                               "musicbox/v1/logos/wordmark.png")),
    LabelledQuery("server rack", "keyword", _b("techstart", "server-rack.jpg")),
    LabelledQuery("margherita pizza", "keyword", _b("foodhub", "margherita-pizza.jpg")),
    LabelledQuery("dark hero", "keyword", _b("bankingonai", "hero-dark.webp")),
    LabelledQuery("teddy bear", "keyword", _b("kidsplay", "teddy-bear.jpg")),
    LabelledQuery("stethoscope", "keyword", _b("medcare", "stethoscope.jpg")),
    LabelledQuery("cherry blossom", "keyword", _b("greenleaf", "cherry-blossom.jpg")),
    # other words for the same thing
    LabelledQuery("puppy", "synonym", _b("petcare", "golden-retriever-puppy.jpg")),
    LabelledQuery("automobile", "synonym", _b("autoworld", "ferrari-488.jpg", "porsche-911-carrera.jpg",
                                              "tesla-model-s.jpg", "bmw-m3.jpg", "mini-cooper.jpg",
                                              "toyota-prius.jpg", "vw-beetle-classic.jpg",
                                              "lamborghini-huracan.jpg", "jeep-wrangler.jpg",
                                              "ford-f150-pickup.jpg")),
    LabelledQuery("motorbike", "synonym", _b("autoworld", "harley-davidson.jpg")),
    LabelledQuery("kitty", "synonym", _b("petcare", "tabby-cat.jpg", "kitten-yarn.jpg")),
    LabelledQuery("couch", "synonym", _b("homestyle", "leather-sofa.jpg")),
    LabelledQuery("physician", "synonym", _b("medcare", "doctor-portrait.jpg", "stethoscope.jpg")),
    LabelledQuery("noodle soup", "synonym", _b("foodhub", "ramen-bowl.jpg")),
    LabelledQuery("aurora borealis", "synonym", _b("travelco", "northern-lights.jpg")),
    LabelledQuery("fiddle", "synonym", _b("musicbox", "violin.jpg")),
    LabelledQuery("pasta", "synonym", _b("foodhub", "spaghetti-bolognese.jpg")),
    LabelledQuery("cryptocurrency", "synonym", _b("bankingonai", "bitcoin-gold.png")),
    LabelledQuery("sneakers", "synonym", _b("fitlife", "running-shoes.jpg")),
    LabelledQuery("computer", "synonym", _b("techstart", "laptop-desk.jpg", "server-rack.jpg",
                                            "data-center.jpg")),
    LabelledQuery("medicine", "synonym", _b("medcare", "pill-bottle.png", "syringe.svg")),
    LabelledQuery("toy blocks", "synonym", ("kidsplay/v1/banners/lego-bricks.jpg",
                                            "kidsplay/v1/banners/building-blocks.png")),
    # misspelled
    LabelledQuery("ferari", "typo", _b("autoworld", "ferrari-488.jpg")),
    LabelledQuery("golden retreiver", "typo", _b("petcare", "golden-retriever-puppy.jpg")),
    LabelledQuery("lamborgini", "typo", _b("autoworld", "lamborghini-huracan.jpg")),
    LabelledQuery("stethescope", "typo", _b("medcare", "stethoscope.jpg")),
    LabelledQuery("expresso cup", "typo", _b("foodhub", "espresso-cup.jpg")),
    LabelledQuery("sunflwer field", "typo", _b("greenleaf", "sunflower-field.jpg")),
    LabelledQuery("saxaphone", "typo", _b("musicbox", "saxophone.jpg")),
    LabelledQuery("treadmil", "typo", _b("fitlife", "treadmill.jpg")),
    LabelledQuery("santorni sunset", "typo", _b("travelco", "santorini-sunset.jpg")),
    LabelledQuery("mortage calculator", "typo", _b("bankingonai", "mortgage-calculator.png")),
    LabelledQuery("microscpe", "typo", _b("medcare", "microscope.jpg")),
    LabelledQuery("dinosuar toy", "typo", _b("kidsplay", "dinosaur-toy.jpg")),
    LabelledQuery("accordian", "typo", _b("musicbox", "accordion.jpg")),
    LabelledQuery("porshe 911", "typo", _b("autoworld", "porsche-911-carrera.jpg")),
    # what the picture shows
    LabelledQuery("red sports car", "descriptive", _b("autoworld", "ferrari-488.jpg", "lamborghini-huracan.jpg",
                                                      "porsche-911-carrera.jpg")),
    LabelledQuery("electric car", "descriptive", _b("autoworld", "tesla-model-s.jpg",
                                                    "ev-charging-station.jpg")),
    LabelledQuery("dark blue banking background", "descriptive", _b("bankingonai", "hero-dark.webp")),
    LabelledQuery("paris landmark", "descriptive", _b("travelco", "eiffel-tower.jpg")),
    LabelledQuery("japanese food", "descriptive", _b("foodhub", "sushi-platter.jpg", "ramen-bowl.jpg")),
    LabelledQuery("morning coffee", "descriptive", ("foodhub/v1/banners/espresso-cup.jpg",
                                                    "homestyle/v1/banners/coffee-mug.png")),
    LabelledQuery("workout equipment", "descriptive", _b("fitlife", "dumbbells.jpg", "kettlebell.png",
                                                         "treadmill.jpg", "jump-rope.png")),
    LabelledQuery("place to keep money safe", "descriptive", _b("bankingonai", "vault-door.jpg",
                                                                "safe-deposit-box.jpg", "piggy-bank.png",
                                                                "savings-jar.jpg")),
    LabelledQuery("pet fish", "descriptive", _b("petcare", "goldfish-bowl.jpg", "aquarium-plants.jpg")),
    LabelledQuery("winter holiday in the mountains", "descriptive", _b("travelco", "snowy-chalet.jpg",
                                                                       "mountain-lake.jpg")),
    LabelledQuery("colourful lights in the night sky", "descriptive", _b("travelco", "northern-lights.jpg")),
    LabelledQuery("something sweet for dessert", "descriptive", _b("foodhub", "chocolate-cake.jpg",
                                                                   "ice-cream-cone.jpg", "pancakes-syrup.jpg")),
    LabelledQuery("string instrument", "descriptive", _b("musicbox", "violin.jpg", "electric-guitar.jpg",
                                                         "ukulele.jpg", "harp.jpg")),
    LabelledQuery("flying machine", "descriptive", ("travelco/v1/banners/airplane-wing.jpg",
                                                    "travelco/v1/banners/hot-air-balloon.jpg",
                                                    "techstart/v1/banners/drone-flying.jpg")),
    LabelledQuery("renewable energy", "descriptive", ("techstart/v1/banners/solar-panel.jpg",
                                                      "autoworld/v1/banners/ev-charging-station.jpg")),
    LabelledQuery("emergency vehicle", "descriptive", _b("medcare", "ambulance.jpg")),
    LabelledQuery("children's toys", "descriptive", _b("kidsplay", "teddy-bear.jpg", "lego-bricks.jpg",
                                                       "toy-train.jpg", "dinosaur-toy.jpg",
                                                       "rocking-horse.jpg", "stuffed-unicorn.jpg",
                                                       "building-blocks.png")),
    LabelledQuery("spring flowers", "descriptive", _b("greenleaf", "tulip-garden.jpg", "cherry-blossom.jpg",
                                                      "rose-bouquet.jpg", "sunflower-field.jpg")),
    LabelledQuery("app icon for the fitness brand", "descriptive", ("fitlife/v1/icons/icon-192.png",
                                                                   "fitlife/v1/icons/icon-512.png")),
    LabelledQuery("social preview image for the travel site", "descriptive", ("travelco/v1/github/social-card.png",)),
    LabelledQuery("place to sleep", "descriptive", ("homestyle/v1/banners/bunk-bed.jpg",
                                                    "homestyle/v1/banners/bedroom-lamp.jpg",
                                                    "travelco/v1/banners/hotel-lobby.jpg",
                                                    "travelco/v1/banners/camping-tent.jpg",
                                                    "petcare/v1/banners/dog-bed.jpg",
                                                    "medcare/v1/banners/hospital-bed.jpg")),
    # Held out: written after the asset text, the calibration point and the blend weight were
    # chosen on the queries above, and never used to choose anything.
    LabelledQuery("tesla", "keyword", _b("autoworld", "tesla-model-s.jpg"), True),
    LabelledQuery("vinyl record", "keyword", _b("musicbox", "vinyl-record.jpg"), True),
    LabelledQuery("foodhub wordmark", "keyword", ("foodhub/v1/logos/wordmark.png",), True),
    LabelledQuery("hot air balloon", "keyword", _b("travelco", "hot-air-balloon.jpg"), True),
    LabelledQuery("kettlebell", "keyword", _b("fitlife", "kettlebell.png"), True),
    LabelledQuery("sofa", "synonym", _b("homestyle", "leather-sofa.jpg"), True),
    LabelledQuery("bunny", "synonym", _b("petcare", "rabbit-carrot.jpg"), True),
    LabelledQuery("bicycle", "synonym", ("fitlife/v1/banners/cyclist-road.jpg",
                                         "kidsplay/v1/banners/tricycle.jpg"), True),
    LabelledQuery("tortoise", "synonym", _b("petcare", "turtle-pond.jpg"), True),
    LabelledQuery("pharmacy", "synonym", _b("medcare", "pill-bottle.png"), True),
    LabelledQuery("hedphones", "typo", _b("musicbox", "headphones.png"), True),
    LabelledQuery("chocolat cake", "typo", _b("foodhub", "chocolate-cake.jpg"), True),
    LabelledQuery("cactis", "typo", _b("greenleaf", "cactus.jpg"), True),
    LabelledQuery("ambulence", "typo", _b("medcare", "ambulance.jpg"), True),
    LabelledQuery("skyscrapers at night in japan", "descriptive", _b("travelco", "tokyo-skyline.jpg"), True),
    LabelledQuery("italian food", "descriptive", _b("foodhub", "margherita-pizza.jpg",
                                                    "spaghetti-bolognese.jpg"), True),
    LabelledQuery("large animal in africa", "descriptive", _b("travelco", "safari-elephant.jpg"), True),
    LabelledQuery("farm animal", "descriptive", ("petcare/v1/banners/horse-stable.jpg",), True),
    LabelledQuery("something to listen to music with", "descriptive", _b("musicbox", "headphones.png",
                                                                          "speaker-stack.jpg",
                                                                          "vinyl-record.jpg",
                                                                          "cassette-tape.png"), True),
    LabelledQuery("medical imaging", "descriptive", _b("medcare", "xray-chest.jpg", "brain-scan.jpg"), True),
)
