import json, itertools, math
P = []
def prod(asin, name, nouns, category, query, pcat, pricing, price, options, attrs, bullets, desc, instruction, iattrs, goal_opts):
    P.append(dict(asin=asin, name=name, type_nouns=nouns, category=category, query=query,
        product_category=pcat, pricing=pricing, price=price,
        options=[{"name": n, "values": v} for n, v in options], attributes=attrs,
        bullet_points=bullets, description=desc, _instr=instruction, _iattrs=iattrs, _gopts=goal_opts))
F = "Clothing, Shoes & Jewelry › Women › Clothing › Tops, Tees & Blouses › T-Shirts"
FM = "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts"
FL = "Clothing, Shoes & Jewelry › Women › Clothing › Active › Leggings"
FS = "Clothing, Shoes & Jewelry › Women › Shoes › Pumps"
B = "Beauty & Personal Care › Skin Care › Face › Moisturizers"
BH = "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos"
G = "Grocery & Gourmet Food › Snacks › Chips & Crisps"
GT = "Grocery & Gourmet Food › Beverages › Tea › Green Tea"
H = "Home & Kitchen › Kitchen & Dining › Travel & To-Go Drinkware › Water Bottles"
GA = "Patio, Lawn & Garden › Gardening & Lawn Care › Plant Containers › Planters"
GL = "Patio, Lawn & Garden › Outdoor Décor › Outdoor Lighting › Path Lights"
E = "Electronics › Headphones, Earbuds & Accessories › Headphones › Earbud Headphones"
EC = "Electronics › Computers & Accessories › Cables & Accessories › Cables › USB Cables"
# fashion
prod("B0WS000001", "Acme Women's Cotton Spandex Crew Neck T-Shirt", ["women", "cotton", "spandex", "crew", "neck", "t", "shirt"], "fashion", "women's t-shirts", F,
     [12.5, 19.99], 19.99, [("color", ["black", "heather grey", "navy blue"]), ("size", ["small", "medium", "large", "x-large"])],
     ["machine wash", "cotton spandex", "short sleeve"], ["95% cotton, 5% spandex", "machine wash cold, tumble dry low", "classic crew neck"],
     "A soft stretch tee with a relaxed fit for everyday wear.", "Find me machine wash women's t-shirts with cotton spandex", ["machine wash", "cotton spandex"],
     [("black", "large"), ("navy blue", "small"), ("heather grey", "medium")])
prod("B0WS000002", "Acme Women's Cotton Spandex Crew Neck T-Shirt Plus", ["women", "cotton", "spandex", "crew", "neck", "t", "shirt"], "fashion", "women's t-shirts", F,
     [21.99], 21.99, [("color", ["black", "white"]), ("size", ["x-large", "xx-large"])],
     ["machine wash", "cotton spandex"], ["95% cotton, 5% spandex", "machine wash cold"],
     "The same crew neck tee cut for extended sizes.", "Find me machine wash women's t-shirts with cotton spandex in extended sizes", ["machine wash"],
     [("white", "xx-large")])
prod("B0WS000003", "Acme Women's Lace Trim Cami Tank Top", ["women", "lace", "trim", "cami", "tank", "top"], "fashion", "women's t-shirts", F,
     [15.0], 15.0, [("color", ["black", "ivory", "rose"]), ("size", ["small", "medium", "large"])],
     ["hand wash", "polyester spandex"], ["lace trim neckline", "hand wash only"],
     "A lightweight cami with a lace trim neckline.", "Find me hand wash women's tank tops with lace trim", ["hand wash"],
     [("ivory", "medium")])
prod("B0WS000004", "Northwind Men's Heavyweight Pocket Tee", ["men", "heavyweight", "pocket", "tee"], "fashion", "men's t-shirts", FM,
     [18.0], 18.0, [("color", ["charcoal", "olive", "white"]), ("size", ["medium", "large", "x-large", "xx-large"])],
     ["machine wash", "100% cotton", "relaxed fit"], ["100% ring spun cotton", "chest pocket", "machine wash warm"],
     "A heavyweight cotton tee with a chest pocket.", "Find me machine wash men's t-shirts with 100% cotton and relaxed fit", ["machine wash", "100% cotton", "relaxed fit"],
     [("olive", "x-large"), ("charcoal", "large")])
prod("B0WS000005", "Northwind Men's Long Sleeve Henley Shirt", ["men", "sleeve", "henley", "shirt"], "fashion", "men's t-shirts", FM,
     [24.99], 24.99, [("color", ["burgundy", "denim blue", "white"]), ("size", ["small", "medium", "large", "x-large"])],
     ["machine wash", "button closure"], ["three button placket", "cotton blend"],
     "A long sleeve henley with a three button placket.", "Find me machine wash men's henley shirts with button closure", ["machine wash", "button closure"],
     [("denim blue", "large")])
prod("B0WS000006", "Stride Women's Yoga Leggings High Waist", ["women", "yoga", "leggings", "waist"], "fashion", "women's leggings", FL,
     [24.99], 24.99, [("color", ["black", "dark green", "plum"]), ("size", ["x-small", "small", "medium", "large"])],
     ["high waist", "tummy control", "4-way stretch"], ["high waist with tummy control", "4-way stretch fabric", "hidden waistband pocket"],
     "Squat proof high waist leggings for yoga and running.", "Find me women's leggings with high waist and tummy control", ["high waist", "tummy control"],
     [("black", "medium"), ("plum", "small")])
prod("B0WS000007", "Stride Women's Yoga Leggings High Waist", ["women", "yoga", "leggings", "waist"], "fashion", "women's leggings", FL,
     [45.99], 45.99, [("color", ["black", "dark green", "plum"]), ("size", ["x-small", "small", "medium", "large"])],
     ["high waist", "tummy control", "4-way stretch"], ["high waist with tummy control", "4-way stretch fabric", "premium brushed fabric"],
     "Premium brushed high waist leggings.", None, None, None)
prod("B0WS000008", "Stride Women's Running Shorts with Liner", ["women", "running", "shorts", "liner"], "fashion", "women's leggings", FL,
     [16.99], 16.99, [("color", ["black", "coral", "gray"]), ("size", ["small", "medium", "large"])],
     ["quick dry", "drawstring closure"], ["built-in liner", "quick dry fabric"],
     "Lightweight running shorts with a built-in liner.", "Find me quick dry women's running shorts with drawstring closure", ["quick dry", "drawstring closure"],
     [("coral", "small")])
prod("B0WS000009", "Bella Women's Pointed Toe Stiletto Pumps", ["women", "toe", "stiletto", "pumps"], "fashion", "women's pumps", FS,
     [39.99, 49.99], 44.99, [("color", ["black patent", "nude", "red"]), ("size", ["6", "7", "7.5", "8", "8.5", "9"])],
     ["rubber sole", "pointed toe", "closed toe"], ["3.5 inch heel", "rubber sole", "synthetic upper"],
     "Classic pointed toe pumps with a stiletto heel.", "Find me women's pumps with rubber sole and pointed toe", ["rubber sole", "pointed toe"],
     [("nude", "7.5"), ("red", "8")])
prod("B0WS000010", "Bella Women's Block Heel Ankle Strap Sandals", ["women", "block", "heel", "ankle", "strap", "sandals"], "fashion", "women's pumps", FS,
     [34.5], 34.5, [("color", ["black", "tan", "silver"]), ("size", ["6", "7", "8", "9"])],
     ["rubber sole", "open toe", "ankle strap"], ["adjustable ankle strap", "2.5 inch block heel"],
     "Open toe sandals with a sturdy block heel.", "Find me women's sandals with open toe and ankle strap", ["open toe", "ankle strap"],
     [("tan", "8")])
# beauty
prod("B0WS000011", "Glow Hyaluronic Acid Face Moisturizer Cream", ["glow", "acid", "face", "moisturizer", "cream"], "beauty", "face moisturizer", B,
     [14.99], 14.99, [("size", ["1.7 fl oz (pack of 1)", "1.7 fl oz (pack of 2)"])],
     ["fragrance free", "hyaluronic acid", "sensitive skin"], ["fragrance free formula", "with hyaluronic acid", "for sensitive skin"],
     "A lightweight daily moisturizer for dry and sensitive skin.", "Find me fragrance free face moisturizer for sensitive skin", ["fragrance free", "sensitive skin"],
     [("1.7 fl oz (pack of 2)",), ("1.7 fl oz (pack of 1)",)])
prod("B0WS000012", "Glow Vitamin C Brightening Serum", ["glow", "vitamin", "c", "serum"], "beauty", "face moisturizer", B,
     [19.5], 19.5, [("size", ["1 fl oz", "2 fl oz"])],
     ["vitamin c", "cruelty free"], ["20% vitamin c", "cruelty free"],
     "A brightening serum with vitamin c and ferulic acid.", "Find me cruelty free face serum with vitamin c", ["cruelty free", "vitamin c"],
     [("2 fl oz",)])
prod("B0WS000013", "Pure Argan Oil Sulfate Free Shampoo", ["argan", "oil", "sulfate", "shampoo"], "beauty", "sulfate free shampoo", BH,
     [11.99], 11.99, [("size", ["8 fl oz", "16 fl oz", "32 fl oz"])],
     ["sulfate free", "paraben free", "dry hair"], ["sulfate free and paraben free", "argan oil for dry hair"],
     "A gentle shampoo with argan oil for dry and damaged hair.", "Find me sulfate free shampoo for dry hair", ["sulfate free", "dry hair"],
     [("16 fl oz",), ("32 fl oz",)])
prod("B0WS000014", "Pure Argan Oil Deep Conditioner", ["argan", "oil", "conditioner"], "beauty", "sulfate free shampoo", BH,
     [13.49], 13.49, [("size", ["8 fl oz", "16 fl oz"])],
     ["sulfate free", "dry hair"], ["deep conditioning", "sulfate free"],
     "A rich conditioner that pairs with the argan oil shampoo.", "Find me sulfate free conditioner for dry hair", ["sulfate free", "dry hair"],
     [("8 fl oz",)])
# grocery
prod("B0WS000015", "Crunchy Sea Salt Kettle Potato Chips", ["sea", "salt", "kettle", "potato", "chips"], "grocery", "potato chips", G,
     [3.99], 3.99, [("flavor name", ["sea salt", "sea salt & vinegar", "jalapeno"]), ("size", ["2 ounce (pack of 12)", "5 ounce (pack of 6)"])],
     ["gluten free", "non gmo", "kosher"], ["kettle cooked in small batches", "gluten free and non gmo"],
     "Thick cut kettle chips cooked in small batches.", "Find me gluten free potato chips that are non gmo", ["gluten free", "non gmo"],
     [("sea salt", "5 ounce (pack of 6)"), ("jalapeno", "2 ounce (pack of 12)")])
prod("B0WS000016", "Crunchy Baked Veggie Straws Snack", ["veggie", "straws", "snack"], "grocery", "potato chips", G,
     [4.49], 4.49, [("flavor name", ["sea salt", "ranch"]), ("size", ["1 ounce (pack of 24)", "7 ounce (pack of 4)"])],
     ["gluten free", "low fat"], ["baked not fried", "gluten free"],
     "Baked veggie straws with a light crunch.", "Find me gluten free veggie snacks that are low fat", ["gluten free", "low fat"],
     [("ranch", "1 ounce (pack of 24)")])
prod("B0WS000017", "Leaf Organic Japanese Sencha Green Tea Bags", ["leaf", "sencha", "tea", "bags"], "grocery", "green tea", GT,
     [8.99], 8.99, [("size", ["20 count (pack of 1)", "20 count (pack of 3)", "100 count"])],
     ["usda organic", "caffeine"], ["usda organic sencha", "individually wrapped tea bags"],
     "A grassy japanese sencha in individually wrapped bags.", "Find me usda organic green tea bags", ["usda organic"],
     [("20 count (pack of 3)",), ("100 count",)])
prod("B0WS000018", "Leaf Decaf Jasmine Green Tea Loose Leaf", ["leaf", "jasmine", "tea", "loose", "leaf"], "grocery", "green tea", GT,
     [12.0], 12.0, [("size", ["4 ounce", "8 ounce"])],
     ["decaffeinated", "loose leaf"], ["naturally decaffeinated", "scented with jasmine blossoms"],
     "Decaffeinated jasmine green tea as loose leaf.", "Find me decaffeinated loose leaf green tea", ["decaffeinated", "loose leaf"],
     [("8 ounce",)])
# home / garden
prod("B0WS000019", "Hydro Stainless Steel Insulated Water Bottle", ["hydro", "steel", "water", "bottle"], "garden", "water bottle", H,
     [22.95], 22.95, [("color", ["black", "lilac", "white"]), ("size", ["21 oz", "32 oz", "40 oz"])],
     ["bpa free", "leak proof", "stainless steel"], ["double wall vacuum insulation", "bpa free leak proof lid"],
     "Keeps drinks cold for 24 hours and hot for 12.", "Find me bpa free water bottles that are leak proof", ["bpa free", "leak proof"],
     [("black", "32 oz"), ("lilac", "21 oz")])
prod("B0WS000020", "Summit Insulated Travel Mug with Handle", ["summit", "travel", "mug", "handle"], "garden", "water bottle", H,
     [19.95], 19.95, [("color", ["black", "white"]), ("size", ["12 oz", "20 oz"])],
     ["bpa free", "leak proof", "stainless steel"], ["double wall vacuum insulation", "bpa free leak proof lid"],
     "A travel mug with a handle that fits most cup holders.", "Find me bpa free travel mugs that are leak proof", ["bpa free", "leak proof"],
     [("white", "20 oz")])
prod("B0WS000021", "Terra Ceramic Plant Pot with Drainage Hole", ["terra", "plant", "pot", "drainage", "hole"], "garden", "plant pots", GA,
     [16.99, 28.99], 22.99, [("color", ["white", "sage green", "terracotta"]), ("size", ["6 inch", "8 inch", "10 inch"])],
     ["drainage hole", "indoor outdoor"], ["drainage hole with plug", "glazed ceramic"],
     "A glazed ceramic planter with a drainage hole and saucer.", "Find me ceramic plant pots with drainage hole for indoor outdoor use", ["drainage hole", "indoor outdoor"],
     [("sage green", "8 inch"), ("white", "6 inch")])
prod("B0WS000022", "Terra Solar Pathway Lights Set", ["terra", "pathway", "lights", "set"], "garden", "solar lights", GL,
     [29.99], 29.99, [("color", ["warm white", "cool white"]), ("size", ["6 pack", "12 pack"])],
     ["solar powered", "waterproof"], ["solar powered auto on at dusk", "ip65 waterproof"],
     "Solar path lights that switch on at dusk.", "Find me solar powered waterproof pathway lights", ["solar powered", "waterproof"],
     [("warm white", "12 pack")])
# electronics
prod("B0WS000023", "Sonic Wireless Earbuds with Charging Case", ["sonic", "earbuds", "charging", "case"], "electronics", "wireless earbuds", E,
     [29.99], 29.99, [("color", ["black", "white", "blue"])],
     ["noise cancelling", "bluetooth 5.3", "water resistant"], ["bluetooth 5.3", "active noise cancelling", "ipx5 water resistant"],
     "True wireless earbuds with 30 hours of battery in the case.", "Find me noise cancelling wireless earbuds with bluetooth 5.3", ["noise cancelling", "bluetooth 5.3"],
     [("white",), ("blue",)])
prod("B0WS000024", "Sonic Over Ear Wireless Headphones", ["sonic", "ear", "headphones"], "electronics", "wireless earbuds", E,
     [59.99], 59.99, [("color", ["black", "silver"])],
     ["noise cancelling", "bluetooth 5.3"], ["over ear cushions", "active noise cancelling"],
     "Over ear headphones with active noise cancelling.", "Find me noise cancelling over ear headphones", ["noise cancelling"],
     [("silver",)])
prod("B0WS000025", "Volt Braided USB C Charging Cable", ["volt", "usb", "c", "charging", "cable"], "electronics", "usb c cable", EC,
     [], 100.0, [("size", ["3 ft", "6 ft", "10 ft"]), ("color", ["black", "red"])],
     ["fast charging", "nylon braided"], ["60w fast charging", "nylon braided jacket"],
     "A braided usb c cable for fast charging.", "Find me nylon braided usb c cables for fast charging", ["nylon braided", "fast charging"],
     [("6 ft", "black")])
prod("B0WS000026", "Volt Lightning to USB Cable 2 Pack", ["volt", "lightning", "usb", "cable", "pack"], "electronics", "usb c cable", EC,
     [9.99], 9.99, [("size", ["3 ft", "6 ft"])],
     ["fast charging"], ["mfi certified", "2 pack"],
     "Certified lightning cables in a two pack.", None, None, None)

products = []
goals = []
for p in P:
    instr, iattrs, gopts = p.pop("_instr"), p.pop("_iattrs"), p.pop("_gopts")
    products.append(p)
    if instr is None:
        continue
    price = p["price"]
    # deterministic budget: the 2nd multiple of 10 strictly above the price (upstream draws 2 of the first 4 and keeps the larger)
    mults = [m for m in range(10, 1000, 10) if m > price][:4]
    budget = float(mults[1]) if len(mults) >= 2 else 1e6
    for combo in gopts:
        # upstream get_synthetic_goals: a {name: value} dict over sorted(option names), and the
        # instruction lists the options in that order
        names = [o["name"] for o in p["options"]]
        goal_options = dict(sorted(zip(names, combo)))
        opt_text = ", and ".join(f"{n}: {v}" for n, v in goal_options.items())
        text = f"{instr} with {opt_text}, and price lower than {budget:.2f} dollars"
        goals.append(dict(asin=p["asin"], name=p["name"], query=p["query"], category=p["category"],
            product_category=p["product_category"], instruction_text=text, attributes=iattrs,
            goal_options=goal_options, price_upper=budget))
# interleave goals deterministically (upstream shuffles with seed 233; we keep a fixed, documented order)
import random
random.Random(233).shuffle(goals)
out = {"version": 1, "products": products, "goals": goals}
print(json.dumps(out, indent=1, ensure_ascii=False))
import sys
print(len(products), len(goals), file=sys.stderr)
