"""The fixed text and prompts a variant's quality is measured on (``_quality``).

Written for rbln-build and dedicated to the public domain (CC0-1.0): anyone may copy, change and
ship it, so a measured figure can always be reproduced from what the project ships. Plain English
prose on ordinary subjects (no code, no tables), about 1,900 words: some 2,400 tokens for a
Llama-3-style tokenizer and more for a small one. ``TEXT_VERSION`` is in every figure: a changed
text is a new figure, never compared with an old one.
"""

from __future__ import annotations

__all__ = ["TEXT", "PROMPTS", "TEXT_VERSION"]

TEXT_VERSION = "rbln-build quality text 1"

PROMPTS = (
    "The river that runs past the old mill",
    "When the baker opened the shop that morning,",
    "A good map tells you three things:",
    "In the winter the village school",
    "The engineer checked the numbers twice because",
    "Once upon a time, in a town by the sea,",
    "The simplest way to keep bread fresh is",
    "On the first page of the notebook she wrote",
)

TEXT = """\
The river that runs past the old mill is not wide, but it is older than the town. Long before anyone \
built a wall or cut a road, the water found its way down from the hills, around the stones and under \
the trees, and it has kept to much the same path ever since. In spring it is loud and brown with the \
snow that melts on the high ground. In late summer it is so quiet that children cross it on the \
stepping stones without getting their feet wet. The people who live along its banks say that you can \
tell the season by the sound of it alone, and after a few years in the town most newcomers find that \
they can do the same.

The mill itself was built by a family of carpenters who came from the north with a cart of tools and \
very little money. They chose the place because the river bends there and the current is strong on \
the outer side of the bend. For the first year they lived in a tent beside the foundations, and the \
story goes that the youngest daughter kept a record of every stone that was laid, with the date and \
the weather, in a small book that is still kept in the town hall. The wheel turned for the first time \
on a cold morning in October. The whole town came to watch, and when the first sack of flour was \
carried out, the miller gave it away to the family who had waited longest.

For nearly a hundred years the mill ground wheat, barley and rye for the farms of the valley. Farmers \
brought their grain in the autumn and left with flour, and in a bad year the miller would take a \
smaller share so that no one went hungry in the winter. The work was hard and the hours were long. A \
miller had to listen to the stones as much as watch them, because a change in the sound meant that \
the gap between them was wrong, and flour that is ground too fine or too coarse will not make good \
bread. Most of what the millers knew was never written down. It was passed from one person to the \
next by working side by side, season after season, until the younger one could hear what the older \
one heard.

When the railway came to the valley, larger mills in the cities began to sell flour more cheaply than \
the old mill could make it. For a while the family tried to compete by working longer hours, and then \
by grinding special flours that the city mills did not make. In the end the wheel stopped. The \
building stood empty for many years. Swallows nested under the roof, and the river went on turning \
around the bend as if nothing had changed. It was only much later that a group of neighbours bought \
the mill, repaired the wheel and opened it again as a place where visitors could see how flour used \
to be made.

When the baker opened the shop that morning, the street was still dark and the air smelled of rain. \
She had been up for three hours already. Bread does not wait for anyone: the dough had been mixed the \
night before and left to rise slowly in the cool back room, and now it had to be shaped, rested and \
baked before the first customers arrived. She worked quickly but without hurry, dividing the dough \
with a metal scraper, weighing each piece and folding it into a tight round. The rounds went into \
baskets lined with cloth, and the baskets went onto a rack near the oven, where it was warm enough \
for the dough to wake up again.

People often ask bakers what the secret of good bread is, and most bakers give the same answer: \
time. Flour, water, salt and yeast are cheap and easy to find. What makes the difference is how long \
you let them work together. A dough that rises slowly develops more flavour, a better crust and a \
crumb that stays soft for longer. A dough that is rushed may look the same when it comes out of the \
oven, but it will be dry by the next afternoon. The baker had learned this from her grandmother, who \
used to say that a loaf remembers every hour you gave it.

The simplest way to keep bread fresh is to store it in a cloth bag in a cool, dry place, and to cut \
it from the middle rather than from the end, so that the two halves can be pushed back together. \
Bread kept in the refrigerator goes stale faster, because the cold helps the starch to harden. Bread \
that is a few days old is not wasted, however. It can be toasted, turned into crumbs, soaked in milk \
and eggs for a pudding, or torn into pieces for a soup. In many kitchens the old loaf is as useful as \
the new one, and some dishes are only good when the bread is stale.

A good map tells you three things: where you are, where you want to go, and what lies in between. \
The first is harder than it sounds. A map of a city is useless if you cannot find yourself on it, and \
many people have stood on a corner turning a paper map around in their hands, trying to match the \
lines to the streets. The second is usually easy, because you know where you want to go before you \
look. The third is where a map earns its keep. It shows the hills you will have to climb, the river \
you will have to cross and the road that looks shorter but is closed in winter.

Mapmakers have always had to decide what to leave out. A map that showed everything would be as \
large as the land itself and just as hard to read. So the mapmaker chooses: roads but not every path, \
towns but not every house, rivers but not every stream. Each choice depends on what the map is for. \
A map for walkers shows footpaths, gates and places to find water. A map for sailors shows the depth \
of the sea, the rocks below the surface and the lights on the coast. The same valley can appear on \
both, and the two maps will hardly look alike.

In the winter the village school was the warmest building for miles. The teacher arrived before the \
children to light the stove, and by the time the first of them came in from the snow, stamping their \
boots at the door, the room smelled of wood smoke and wet wool. There were never more than twenty \
pupils, from the very young to those almost old enough to leave, and they all learned in the same \
room. The older ones helped the younger ones with their reading, and in return the younger ones \
listened while the older ones practised their speeches for the spring fair.

Lessons followed the seasons. In autumn the children counted apples and measured the height of the \
corn. In winter they read stories aloud and wrote letters to a school in another country, which took \
weeks to arrive and weeks more to be answered. In spring they planted a garden behind the school and \
kept a record of which seeds came up first. The teacher believed that children learn best when they \
can see why a thing matters, and so arithmetic was taught with coins and scales, and geography with \
the map of the valley that hung beside the door.

The engineer checked the numbers twice because the bridge would carry a train, and a train does not \
forgive a mistake. The first calculation had been done by hand, on paper, with every step written \
out. The second was done a different way, from the other end of the problem, so that an error in the \
first would not simply be repeated in the second. When the two answers agreed, she wrote them both \
into the report with a note explaining how each had been found. A colleague would check them a third \
time before any steel was ordered.

Good engineering is mostly careful bookkeeping. Every beam, bolt and cable has a load it can carry \
and a load it will have to carry, and the difference between the two is the margin of safety. The \
margin must cover everything that cannot be known in advance: a hotter summer than usual, a heavier \
train, a bolt that was tightened a little less than it should have been. Engineers argue about how \
large a margin should be, but they all agree that it must be written down, with the reasons for it, \
so that the people who maintain the bridge in fifty years will know what was assumed.

Once upon a time, in a town by the sea, there lived a clockmaker who could not tell the time. He \
could build a clock that kept perfect time for a year, he could repair a watch that had been dropped \
in the harbour, and he could tell from the ticking of a clock across the room whether it was running \
fast or slow. But if you asked him what time it was, he would look puzzled and say that it depended \
on which clock you meant. The people of the town laughed at this at first. Later they understood \
that he was the only one among them who had really thought about the question.

Every clock in the town, he explained, told a slightly different time. The church clock was set by \
the sexton, who set it by the sun. The clock at the station was set by a signal from the city. The \
clock in the tavern was kept ten minutes fast so that the customers would leave on time. None of them \
was wrong, exactly; each was right for its purpose. What mattered was to know which clock you were \
reading and what it had been set by. The clockmaker kept a notebook in which he wrote down, for every \
clock he had ever repaired, how it had been set and by whom.

On the first page of the notebook she wrote the date, her name and a single sentence: keep a record \
of what you did and why. She had found the notebook in a drawer of her grandfather's desk, years \
after he had died, and it was full of small observations about the weather, the garden, the price of \
things at the market and the names of the birds that came to the feeder each winter. None of it was \
important on its own. Together, over forty years, it told the story of a place and of a man who had \
paid attention to it.

She decided to continue the notebook in the same way. Each evening she wrote down what the day had \
been like, what she had planted or repaired, and anything that had surprised her. At first it felt \
like a chore, and some days she wrote only a line. After a few months she noticed that she had begun \
to look at things more carefully during the day, knowing that she would write about them in the \
evening. After a year she could look back and see the shape of the seasons in her own handwriting, \
and she understood why her grandfather had kept the habit for so long.

The town by the river has changed a great deal since the mill was built. There are paved roads where \
there were cart tracks, and a bridge of steel and concrete where there was a ford. The school has \
more than one room now, and the bakery has an electric oven as well as the old brick one. But the \
river still turns at the bend, the swallows still nest under the mill roof, and on a quiet evening in \
late summer you can still hear the water moving over the stones, much as the first carpenters heard \
it when they chose the place to build.
"""
